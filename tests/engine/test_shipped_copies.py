"""The shipped models, alone (no drafts, names or cache), copy a name defined above where it
recurs, in every language they were trained on: the skill that carries completion in code
the model has never seen. Each case is a small file whose distinctive name is defined once,
then typed again: the cursor sits after its first few characters."""

import pytest

from redraft.engine import SHIPPED, Engine

# language -> [(text before the cursor, the rest of the name)]; the text after the cursor is "\n".
CASES = {
    "python": [
        ("import json\n\n\ndef reconcile_ledger_entries(entries, opening):\n    total = opening\n"
         "    for entry in entries:\n        total += entry.amount\n    return total\n\n\n"
         "def main(path):\n    with open(path) as f:\n        entries = json.load(f)\n"
         "    balance = reconcile_le", "dger_entries"),
        ("class Inventory:\n    def __init__(self):\n        self.pending_restock_orders = []\n\n"
         "    def order(self, item):\n        self.pending_re", "stock_orders"),
        ("import os\n\nDEFAULT_ARCHIVE_DIRECTORY = os.path.expanduser('~/archive')\n\n\n"
         "def archive(name):\n    target = os.path.join(DEFAULT_AR", "CHIVE_DIRECTORY"),
        ("def tokenize(text):\n    normalized_fragments = []\n    for word in text.split():\n"
         "        normalized_fr", "agments"),
    ],
    "typescript": [
        ("export function computeShippingEstimate(weight: number, zone: string): number {\n"
         "  return weight * (zone === 'eu' ? 2 : 3);\n}\n\n"
         "export function quote(order: { weight: number; zone: string }): string {\n"
         "  const cost = computeSh", "ippingEstimate"),
        ("interface RetryPolicy {\n  maxAttempts: number;\n}\n\n"
         "export class Client {\n  private readonly outstandingRequests = new Map<string, number>();\n\n"
         "  track(id: string): void {\n    this.outstandingRe", "quests"),
        ("const STALE_SESSION_TIMEOUT_MS = 30 * 60 * 1000;\n\n"
         "export function isStale(lastSeen: number, now: number): boolean {\n"
         "  return now - lastSeen > STALE_SES", "SION_TIMEOUT_MS"),
        ("export function render(items: string[]): string {\n  const visibleListItems = items.filter(Boolean);\n"
         "  return visibleLi", "stItems"),
    ],
    "javascript": [
        ("function parseQueryParameters(url) {\n  const out = {};\n  return out;\n}\n\n"
         "module.exports = function handler(req) {\n  const params = parseQu", "eryParameters"),
        ("class Cache {\n  constructor() {\n    this.evictionCandidates = [];\n  }\n\n"
         "  evict() {\n    return this.evictionCa", "ndidates"),
        ("const MAXIMUM_UPLOAD_BYTES = 10 * 1024 * 1024;\n\nfunction check(file) {\n"
         "  if (file.size > MAXIMUM_UP", "LOAD_BYTES"),
        ("function summarize(rows) {\n  let accumulatedWidth = 0;\n  for (const row of rows) {\n"
         "    accumulatedWi", "dth"),
    ],
    "go": [
        ("package billing\n\nfunc computeInvoiceTotal(lines []Line) int {\n\ttotal := 0\n"
         "\tfor _, l := range lines {\n\t\ttotal += l.Amount\n\t}\n\treturn total\n}\n\n"
         "func Render(lines []Line) string {\n\tt := computeIn", "voiceTotal"),
        ("package queue\n\ntype Worker struct {\n\tpendingDeliveries []string\n}\n\n"
         "func (w *Worker) Add(id string) {\n\tw.pendingDe", "liveries"),
        ("package server\n\nconst defaultHandshakeTimeout = 5 * time.Second\n\n"
         "func dial(addr string) error {\n\tctx, cancel := context.WithTimeout(context.Background(), defaultHa",
         "ndshakeTimeout"),
        ("package text\n\nfunc Split(s string) []string {\n\tnormalizedTokens := []string{}\n"
         "\tfor _, f := range strings.Fields(s) {\n\t\tnormalizedTo", "kens"),
    ],
    "rust": [
        ("fn compute_checksum_digest(data: &[u8]) -> u32 {\n    data.iter().map(|&b| b as u32).sum()\n}\n\n"
         "pub fn verify(data: &[u8], expected: u32) -> bool {\n    compute_ch", "ecksum_digest"),
        ("pub struct Scheduler {\n    queued_background_jobs: Vec<Job>,\n}\n\n"
         "impl Scheduler {\n    pub fn push(&mut self, job: Job) {\n        self.queued_ba", "ckground_jobs"),
        ("const MAX_RECONNECT_ATTEMPTS: usize = 8;\n\n"
         "fn retry(n: usize) -> bool {\n    n < MAX_REC", "ONNECT_ATTEMPTS"),
        ("fn words(text: &str) -> Vec<String> {\n    let mut collected_fragments = Vec::new();\n"
         "    for w in text.split_whitespace() {\n        collected_fr", "agments"),
    ],
}


# First-token p of each shipped model on these cases, measured when it shipped. Where it is
# >= 0.5 the model copies and the test holds it there. Where it is not yet (the run that
# trains them goes on), the test holds the model at what it shipped with, less 0.15 of noise
# room; below 0.15 there is nothing to hold, and the 0.5 bar is an expected failure that
# turns red (strict) once a model reaches it, which says to update this table.
SHIPPED_P = {
    "redraft-diffusion": {"python": 0.71, "typescript": 0.49, "javascript": 0.70, "go": 0.72, "rust": 0.39},
    "redraft-ar": {"python": 0.71, "typescript": 0.48, "javascript": 0.72, "go": 0.71, "rust": 0.46},
}
BAR, ROOM = 0.5, 0.15


@pytest.fixture(scope="module", params=SHIPPED)
def engine(request):
    return Engine.load(request.param)


def test_every_trained_language_has_cases(engine):
    trained = engine.model_config.languages or ("python",)
    assert set(trained) <= set(CASES), set(trained) - set(CASES)


def first_token_p(engine, prefix: str, rest: str) -> tuple[float, str]:
    """The probability the model alone commits the first token of the name's rest with (0 when
    it commits another token), and its whole text."""
    sampler = engine.config.sampler.with_(span=12, min_score=float("-inf"))
    out = engine.infill(prefix, "\n", sampler=sampler)
    if not out.token_ids:
        return 0.0, out.text
    first = engine.tokenizer.decode([out.token_ids[0]])
    right = bool(out.text) and rest.startswith(out.text[:len(first)])
    return (out.confidences[0] if right else 0.0), out.text


@pytest.mark.parametrize("language", sorted(CASES))
def test_copies_a_name_defined_above(engine, language, request):
    if language not in (engine.model_config.languages or ("python",)):
        pytest.skip(f"{engine.name} was not trained on {language}")
    shipped_p = SHIPPED_P.get(engine.name, {}).get(language, BAR)
    if shipped_p < ROOM:
        request.node.add_marker(pytest.mark.xfail(
            strict=True, reason=f"{engine.name} does not copy in {language} yet (p = {shipped_p:.2f})"))
    got = [first_token_p(engine, prefix, rest) for prefix, rest in CASES[language]]
    assert got, "no cases"
    p = sum(g[0] for g in got) / len(got)
    whole = sum(text.startswith(rest) for (_, text), (_, rest) in zip(got, CASES[language]))
    if shipped_p >= BAR or shipped_p < ROOM:
        assert p >= BAR, got
        assert whole >= len(got) // 2, got
    else:  # not at the bar yet: no worse than it shipped
        assert p >= shipped_p - ROOM, (p, got)
