"""Render `redraft eval infill --json` reports of several models as one markdown table.

    redraft eval infill --files corpus/heldout --model redraft-ar --json > ar.json
    redraft eval infill --files corpus/heldout --model redraft-diffusion --json > diffusion.json
    python tests/bench/eval_table.py ar.json diffusion.json

Reports from before the drafts (no `drafts`, no `abstain_rate`) render with dashes there.
"""

from __future__ import annotations

import json
import sys

COLUMNS = [("n", "n", "{:d}"), ("exact_match", "exact", "{:.3f}"), ("correct_prefix", "prefix", "{:.3f}"),
           ("edit_similarity", "edit sim", "{:.3f}"), ("syntax_valid", "syntax", "{:.3f}"),
           ("abstain_rate", "abstain", "{:.2f}"), ("p50_ms", "p50 ms", "{:.0f}"), ("p95_ms", "p95 ms", "{:.0f}"), ("encode_ms", "encode ms", "{:.1f}"),
           ("generate_ms", "generate ms", "{:.1f}"), ("forwards", "forwards", "{:.1f}"),
           ("tokens_per_forward", "tok/fwd", "{:.2f}")]


def table(reports: list[dict], labels: list[str]) -> str:
    kinds = list(reports[0]["kinds"])
    head = "| kind | model | " + " | ".join(c[1] for c in COLUMNS) + " |"
    rows = [head, "|" + " --- |" * (len(COLUMNS) + 2)]
    for kind in kinds:
        for label, rep in zip(labels, reports):
            s = rep["kinds"].get(kind, {})
            cells = [fmt.format(s[key]) if s.get(key) is not None else "–" for key, _, fmt in COLUMNS]
            rows.append(f"| {kind} | {label} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    reports = [json.load(open(p)) for p in argv]
    print(table(reports, [f"{r['model']}, drafts {r['drafts']}" if "drafts" in r else r["model"] for r in reports]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
