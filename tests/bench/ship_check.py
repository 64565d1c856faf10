"""A candidate model against the shipped one it would replace, per language, on the same cursors.

    python tests/bench/ship_check.py --candidate RUN_SNAPSHOT --reference redraft-ar \
        --files CORPUS/valid [--mode alone|server] [--limit 100] [--seed 3] [--min-score S] \
        [--out RESULT.json]

The gate a new pair of weights passes before it ships (models-and-training.md): for each
language, `redraft eval infill` (the server's own path) answers every cursor with the candidate
and the reference in turn (`--twin`), so a busy spell slows both alike. `alone`: drafts, names
and the cache off, no prompt lookup on either kind of model (the model alone); `server`: the
server's defaults and span budgets (what users get). Prints one markdown row per language and
kind: the candidate's exact / correct prefix / edit similarity, the reference's, the difference
in points, the share of cursors each abstained on, and the ratio of generate times; `--out`
keeps the whole reports. `--min-score` sets the candidate's abstention bar (its config's by
default): a new model's scores sit elsewhere, so its bar is calibrated on these packages too.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

# (language folder, file endings, kinds): rest of line everywhere, blocks where the corpus has most.
ROWS = [("python", "py", "rest_of_line,block"), ("typescript", "ts", "rest_of_line"),
        ("go", "go", "rest_of_line"), ("rust", "rs", "rest_of_line")]
ALONE = ["--drafts", "off", "--names", "off", "--cache", "off", "--twin-lookup", "off", "--window-lookup", "off"]
METRICS = ("exact_match", "correct_prefix", "edit_similarity")


def report_for(args, lang: str, ext: str, kinds: str) -> dict:
    cmd = [sys.executable, "-m", "redraft.server.cli", "eval", "infill", "--files", str(args.files / lang),
           "--ext", ext, "--model", args.candidate, "--twin", args.reference, "--kinds", kinds,
           "--limit", str(args.limit), "--seed", str(args.seed), "--dtype", args.dtype, "--json"]
    cmd += ALONE if args.mode == "alone" else ["--spans", "server"]
    if args.min_score is not None:
        cmd += ["--min-score", str(args.min_score)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"ship_check: {' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout)


def rows_of(lang: str, rep: dict) -> list[dict]:
    rows = []
    for kind, s in rep["kinds"].items():
        t = s["twin"]
        rows.append({"language": lang, "kind": kind, "n": s["n"],
                     "candidate": [round(s[m], 3) for m in METRICS], "reference": [round(t[m], 3) for m in METRICS],
                     "points": [round(100 * (s[m] - t[m]), 1) for m in METRICS],
                     "abstained": [s["abstain_rate"], t["abstain_rate"]],
                     "generate_ratio": s["vs_twin"]["generate_ms"]})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--candidate", required=True, help="checkpoint folder of the model that would ship")
    ap.add_argument("--reference", required=True, help="the shipped model it would replace")
    ap.add_argument("--files", type=Path, required=True, help="corpus split with <language>/ folders")
    ap.add_argument("--mode", choices=("alone", "server"), default="alone")
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--min-score", type=float, default=None, help="the candidate's abstention bar")
    ap.add_argument("--languages", default=",".join(r[0] for r in ROWS))
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    wanted = args.languages.split(",")
    reports, rows = {}, []
    for lang, ext, kinds in ROWS:
        if lang not in wanted:
            continue
        reports[lang] = report_for(args, lang, ext, kinds)
        rows += rows_of(lang, reports[lang])
    bar = "" if args.min_score is None else f", candidate min_score {args.min_score}"
    print(f"candidate {args.candidate} against {args.reference}: {args.mode}, {args.files}, "
          f"{args.limit} cursors, seed {args.seed}, dtype {args.dtype}{bar}")
    print("| language, kind | candidate | reference | points | abstained | generate × reference |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        ratio = "-" if r["generate_ratio"] is None else f"{r['generate_ratio']:.2f}"
        print(f"| {r['language']}, {r['kind']} | {' / '.join(f'{v:.3f}' for v in r['candidate'])} | "
              f"{' / '.join(f'{v:.3f}' for v in r['reference'])} | "
              f"{' / '.join(f'{v:+.1f}' for v in r['points'])} | "
              f"{' / '.join('-' if v is None else f'{v:.2f}' for v in r['abstained'])} | {ratio} |")
    if args.out:
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows,
                                        "reports": reports}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
