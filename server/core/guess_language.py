"""The language of a text that comes without a language id (HTTP clients such as Zed's FIM
providers send none): from the file's path when there is one, through the same extension
map the language server uses (languages.canonical); else from the text itself, a bounded
look at a few kilobytes for a shebang or for the shapes of lines only one language writes.
A guess is made only when it is clear: one language well ahead of every other. Otherwise
the answer is None, and the text stays plain.

It knows nothing of documents, requests or models: strings in, a language id out.
"""

from __future__ import annotations

import re

from .languages import canonical

HEAD_CHARS, NEAR_CHARS, AFTER_CHARS = 2048, 4096, 1024  # what is read: the file's start, the cursor's surroundings
MIN_SCORE = 2  # a guess needs at least one strong sign (or two weak ones) ...
LEAD = 2  # ... and more than LEAD times the score of the next language
PER_SIGN = 3  # a sign counts at most this many times: one repeated idiom does not outweigh the rest

# A shebang's interpreter -> language id.
_INTERPRETERS = ((re.compile(r"python[\d.]*$"), "python"), (re.compile(r"(ts-node|tsx|deno)$"), "typescript"),
                 (re.compile(r"(node|nodejs|bun)$"), "javascript"))


class _Sign:
    """A line or idiom one language writes: its pattern (line-anchored with ^ and $), weight,
    and words one of which it cannot match without (a substring test first, so a text pays
    for the regular expressions of the few signs it might show)."""

    def __init__(self, pattern: str, weight: int, *words: str):
        self.pattern, self.weight, self.words = re.compile(pattern, re.MULTILINE), weight, words

    def score(self, text: str) -> int:
        if not any(w in text for w in self.words):
            return 0
        return self.weight * min(PER_SIGN, len(self.pattern.findall(text)))


# TypeScript's signs add to JavaScript's (TS is JS with types); C++'s to C's likewise.
_SIGNS: dict[str, list[_Sign]] = {
    "python": [
        _Sign(r"^[ \t]*(async[ \t]+)?def[ \t]+\w+[ \t]*\(", 2, "def"),
        _Sign(r"^[ \t]*class[ \t]+\w+[ \t]*(\([^)\n]*\))?[ \t]*:[ \t]*$", 2, "class"),
        _Sign(r"^[ \t]*from[ \t]+[\w.]+[ \t]+import[ \t]", 2, "import"),
        _Sign(r"^[ \t]*import[ \t]+[\w.]+([ \t]+as[ \t]+\w+)?([ \t]*,[ \t]*[\w.]+)*[ \t]*$", 1, "import"),
        _Sign(r"^[ \t]*(if|elif|else|for|while|with|try|except|finally)\b[^\n{};]*:[ \t]*$", 1, ":"),
        _Sign(r"\bself\.\w", 1, "self."),
    ],
    "go": [
        _Sign(r"^package[ \t]+\w+[ \t]*$", 2, "package"),
        _Sign(r"^func[ \t]+(\([^)\n]*\)[ \t]*)?\w+[ \t]*\(", 2, "func"),
        _Sign(r"\bif[ \t]+err[ \t]*!=[ \t]*nil\b", 2, "nil"),
        _Sign(r"^import[ \t]+[(\"]", 1, "import"),
        _Sign(r"\w[ \t]*:=[ \t]*\S", 1, ":="),
        _Sign(r"\bfmt\.\w", 1, "fmt."),
    ],
    "rust": [
        _Sign(r"^[ \t]*(pub(\([^)\n]*\))?[ \t]+)?(async[ \t]+)?(unsafe[ \t]+)?fn[ \t]+\w+", 2, "fn"),
        _Sign(r"\blet[ \t]+mut\b", 2, "mut"),
        _Sign(r"^[ \t]*impl\b", 2, "impl"),
        _Sign(r"^[ \t]*use[ \t]+\w+::", 1, "use"),
        _Sign(r"\b(println|vec|format|assert_eq|panic)!\(", 1, "!("),
        _Sign(r"&mut\b|->[ \t]*(Self|Result|Option|Vec|String|u\d+|i\d+|usize)\b", 1, "&mut", "->"),
    ],
    "javascript": [
        _Sign(r"^[ \t]*(export[ \t]+)?(default[ \t]+)?(async[ \t]+)?function\b", 2, "function"),
        _Sign(r"^[ \t]*import[ \t][^\n]*\bfrom[ \t]+['\"]", 2, "from"),
        _Sign(r"\brequire\(['\"]", 2, "require("),
        _Sign(r"\bconsole\.\w+\(", 2, "console."),
        _Sign(r"^[ \t]*(export[ \t]+)?(const|let|var)[ \t]+[\w$]+[ \t]*=", 1, "const", "let", "var"),
        _Sign(r"===|!==", 1, "===", "!=="),
        _Sign(r"=>", 1, "=>"),
    ],
    "typescript": [
        _Sign(r"^[ \t]*(export[ \t]+)?(declare[ \t]+)?interface[ \t]+\w+", 2, "interface"),
        _Sign(r"^[ \t]*(export[ \t]+)?type[ \t]+\w+[ \t]*(<[^>\n]*>)?[ \t]*=", 2, "type"),
        _Sign(r"\w\??[ \t]*:[ \t]*(string|number|boolean|unknown|any)\b", 2,
              "string", "number", "boolean", "unknown", "any"),
    ],
    "java": [
        _Sign(r"^package[ \t]+[\w.]+;", 2, "package"),
        _Sign(r"^import[ \t]+(static[ \t]+)?[\w.]+(\.\*)?;", 2, "import"),
        _Sign(r"\bSystem\.(out|err)\.|@Override\b", 2, "System.", "@Override"),
        _Sign(r"\b(public|private|protected)[ \t]+(static[ \t]+)?(final[ \t]+)?(class|interface|enum|void)\b", 1,
              "public", "private", "protected"),
    ],
    "c": [
        _Sign(r"^#[ \t]*include[ \t]*[<\"]", 2, "include"),
        _Sign(r"^#[ \t]*(define|ifndef|ifdef|endif|pragma)\b", 1, "#"),
        _Sign(r"\b(printf|malloc|free|sizeof)\(", 1, "printf(", "malloc(", "free(", "sizeof("),
    ],
    "cpp": [
        _Sign(r"\bstd::", 2, "std::"),
        _Sign(r"^[ \t]*(using[ \t]+)?namespace\b", 2, "namespace"),
        _Sign(r"^[ \t]*template[ \t]*<", 2, "template"),
    ],
}
_EXTENDS = {"typescript": "javascript", "cpp": "c"}  # a dialect whose signs add to its base's


def infer(path: str, prefix: str, suffix: str = "") -> str | None:
    """The language id of the text `prefix` + `suffix` of the file at `path` ("" when unknown):
    the path's extension decides when the path has one (an extension no grammar reads leaves
    the text plain: None); else the text (`from_text`)."""
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    if name.strip(".") and "." in name.strip("."):
        return canonical(None, name)
    return from_text(prefix, suffix)


def from_text(prefix: str, suffix: str = "") -> str | None:
    """The language the text is clearly written in, or None: a shebang's interpreter, else the
    language whose signs (_SIGNS) score at least MIN_SCORE and more than LEAD times any other.
    Reads at most the file's first HEAD_CHARS, NEAR_CHARS before the cursor and AFTER_CHARS
    after it."""
    head = prefix[:HEAD_CHARS]
    first = (head if "\n" in head else head + suffix[:AFTER_CHARS]).split("\n", 1)[0]  # (the cursor may be on it)
    if first.startswith("#!"):
        return _shebang(first)
    start = max(HEAD_CHARS, len(prefix) - NEAR_CHARS)
    gap = "\n" if start > HEAD_CHARS else ""  # the text between them is not read
    sample = head + gap + prefix[start:] + suffix[:AFTER_CHARS]  # the cursor's line stays whole
    scores = {lang: sum(sign.score(sample) for sign in signs) for lang, signs in _SIGNS.items()}
    for dialect, base in _EXTENDS.items():  # the dialect's own signs pick it within its family
        scores[base], scores[dialect] = scores[base] + scores[dialect], scores[dialect]
    families = {lang: s for lang, s in scores.items() if lang not in _EXTENDS}
    ranked = sorted(families.items(), key=lambda kv: kv[1], reverse=True)
    (best, score), second = ranked[0], ranked[1][1]
    if score < MIN_SCORE or score <= LEAD * second:
        return None
    dialect = next((d for d, b in _EXTENDS.items() if b == best and scores[d] >= MIN_SCORE), None)
    return dialect or best


def _shebang(line: str) -> str | None:
    """The language of `#!/usr/bin/env python3 -u` and the like; None for other interpreters."""
    words = line[2:].split()
    if words and words[0].endswith("/env"):
        words = [w for w in words[1:] if not w.startswith("-")]  # `env -S node --flag`
    if not words:
        return None
    program = words[0].rsplit("/", 1)[-1]
    return next((lang for pattern, lang in _INTERPRETERS if pattern.match(program)), None)
