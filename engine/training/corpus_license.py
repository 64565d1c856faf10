"""Licence checks for corpus sources: only permissively licensed code goes in.

A licence statement (an SPDX-like expression, a Debian short name, a PyPI classifier or
a package.json field) reads as "permissive", "restrictive" or "unknown". OR picks the
most permissive alternative; AND needs every part permissive. A package goes in only
when every statement it makes is permissive: one restrictive or unknown one keeps it out.
"""

from __future__ import annotations

import json
import re

PERMISSIVE, RESTRICTIVE, UNKNOWN = "permissive", "restrictive", "unknown"
_RANK = {RESTRICTIVE: 0, UNKNOWN: 1, PERMISSIVE: 2}
# Checked first: a name that matches here is never permissive ("LGPL" also contains "GPL").
_RESTRICTIVE = re.compile(r"\b(A?GPL|LGPL|GNU|MPL|Mozilla|EPL|Eclipse|CDDL|Artistic|SSPL|EUPL|OSL|CC-BY-SA|CC-BY-NC"
                          r"|BUSL|Business Source|Elastic|Proprietary|Commercial|UNLICENSED|Other/Proprietary)\b", re.I)
_PERMISSIVE = re.compile(r"\b(MIT|MIT-0|Expat|X11|BSD\w*|0BSD|Apache|ISC|ISCL|PSF|PSF-2\.0|Python-2\.0|Python Software"
                         r"|Unlicense|Zlib|BSL-1\.0|Boost)\b", re.I)
# Free text in a License field (some projects paste the whole licence there).
_TEXTS = [("Permission is hereby granted, free of charge", "MIT"),
          ("Redistribution and use in source and binary forms", "BSD"),
          ("Apache License", "Apache-2.0"), ("GNU GENERAL PUBLIC LICENSE", "GPL"),
          ("GNU LESSER GENERAL PUBLIC", "LGPL"), ("Mozilla Public License", "MPL")]


def _atom(name: str) -> str:
    name = re.sub(r"\s+WITH\s+.*$", "", name.strip(), flags=re.I)  # exceptions only widen a licence
    if not name or name.upper() in ("UNKNOWN", "NONE", "OSI APPROVED"):
        return UNKNOWN
    if _RESTRICTIVE.search(name):
        return RESTRICTIVE
    if name.lower() in ("go", "golang", "python"):  # Debian's names for the Go project's BSD licence and the PSF's
        return PERMISSIVE
    return PERMISSIVE if _PERMISSIVE.search(name) else UNKNOWN


def _split_top(expr: str, word: str) -> list[str]:
    """Split `expr` at `word` (OR/AND, any case) outside parentheses."""
    parts, depth, start = [], 0, 0
    pattern = re.compile(rf"\s+{word}\s+" + (r"|\s*/\s*" if word == "or" else r"|\s*;\s*"), re.I)
    i = 0
    while i < len(expr):
        ch = expr[i]
        depth += (ch == "(") - (ch == ")")
        m = pattern.match(expr, i) if depth == 0 else None
        if m and m.end() > i:
            parts.append(expr[start:i])
            start = i = m.end()
            continue
        i += 1
    parts.append(expr[start:])
    return [p.strip() for p in parts if p.strip()]


def classify(expr: str) -> str:
    """permissive / restrictive / unknown for one licence expression."""
    expr = (expr or "").strip()
    while expr.startswith("(") and expr.endswith(")") and _balanced(expr[1:-1]):
        expr = expr[1:-1].strip()
    alternatives = _split_top(expr, "or")
    if len(alternatives) > 1:
        return max((classify(a) for a in alternatives), key=_RANK.__getitem__)
    parts = _split_top(expr, "and")
    if len(parts) > 1:
        return min((classify(p) for p in parts), key=_RANK.__getitem__)
    return _atom(expr)


def _balanced(s: str) -> bool:
    depth = 0
    for ch in s:
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return False
    return depth == 0


def verdict(statements: list[str]) -> str:
    """A package's verdict: permissive only if it states something and all of it is permissive."""
    if not statements:
        return UNKNOWN
    return min((classify(s) for s in statements), key=_RANK.__getitem__)


def free_text(text: str) -> str:
    """A licence name for a License field: itself when short, else what its text says."""
    if len(text) <= 100 and "\n" not in text.strip():
        return text.strip()
    names = [name for needle, name in _TEXTS if needle.lower() in text.lower()]
    return " AND ".join(dict.fromkeys(names)) or "UNKNOWN"


def wheel_statements(metadata: str) -> list[str]:
    """Licence statements of a wheel's METADATA: License-Expression if any, else classifiers and License."""
    headers = metadata.split("\n\n", 1)[0]
    fields: dict[str, list[str]] = {}
    key = None
    for line in headers.splitlines():
        if line.startswith((" ", "\t")) and key:  # continuation of a long License field
            fields[key][-1] += "\n" + line.strip()
        elif ":" in line:
            key, value = line.split(":", 1)
            fields.setdefault(key, []).append(value.strip())
    if fields.get("License-Expression"):
        return fields["License-Expression"]
    out = [c.rsplit("::", 1)[1].strip() for c in fields.get("Classifier", []) if c.startswith("License ::")]
    out = [c for c in out if c != "OSI Approved"]
    lic = [free_text(v) for v in fields.get("License", []) if v.strip() and v.strip().upper() != "UNKNOWN"]
    return out + lic


def package_json_statements(text: str) -> list[str]:
    """Licence statements of an npm package.json ("license", or the old "licenses" list)."""
    try:
        meta = json.loads(text)
    except ValueError:
        return []
    found = meta.get("license")
    items = found if isinstance(found, list) else [found] if found else []
    items += meta.get("licenses") or [] if isinstance(meta.get("licenses"), list) else []
    out = []
    for item in items:
        name = item.get("type", "") if isinstance(item, dict) else str(item)
        out.append("UNKNOWN" if name.upper().startswith("SEE LICENSE") else name)
    return out


def dep5_statements(text: str) -> list[str]:
    """License fields of a Debian machine-readable copyright file (DEP-5), [] if not DEP-5.

    Only paragraphs with a Files field count (stand-alone License paragraphs hold texts);
    those covering only debian/ (the packaging, which the corpus does not take) are skipped.
    """
    paragraphs = re.split(r"\n\s*\n", text.strip())
    if not paragraphs or not re.search(r"^Format:.*copyright-format", paragraphs[0], re.M | re.I):
        return []
    out = []
    for para in paragraphs:
        fields = _fields(para)
        if "files" not in fields or "license" not in fields:
            continue
        files = fields["files"].split()
        if files and all(f.startswith("debian/") or f == "debian" for f in files):
            continue
        out.append((fields["license"].splitlines() or [""])[0].strip())  # an empty field: unknown
    return out


def _fields(para: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    key = None
    for line in para.splitlines():
        if line[:1] in (" ", "\t") and key:
            fields[key] += "\n" + line.strip()
        elif ":" in line:
            key, value = line.split(":", 1)
            key = key.strip().lower()
            fields[key] = value.strip()
    return fields
