"""The quality curve of a training run: exact match and correct prefix against tokens seen.

    python tests/bench/quality_curve.py --run RUN_DIR --files CORPUS/valid --out docs/images/quality.png

Every snapshot of the run (RUN_DIR/step-N, and RUN_DIR/last) is scored by `redraft eval infill`
(the server's own path) on the same rest-of-line samples of the validation packages, per
language: the model alone (drafts and names off) and as the server runs it (defaults). Scores
already in OUT.json are kept, so the command can be rerun as snapshots appear. Writes OUT.json
and a plot of both curves against the tokens each snapshot had seen.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from redraft.engine.training.ship import init_history

LANGS = {"python": ".py", "typescript": ".ts", "go": ".go", "rust": ".rs"}
MODES = {"model alone": ["--drafts", "off", "--names", "off"], "server": []}


def snapshots(run: Path) -> list[tuple[int, int, Path]]:
    """(step, tokens seen, folder) of each snapshot, by step; the tokens count the warm start's
    own training too (a run resumed from a shipped model, a conversion from an AR state)."""
    out = []
    for d in sorted(run.glob("step-*")) + [run / "last"]:
        state = d / "train_state.json"
        if state.is_file():
            st = json.loads(state.read_text())
            earlier = init_history(st.get("meta", {}))
            tokens = (st["log"][-1]["tokens"] if st["log"] else 0) + (earlier[0] if earlier else 0)
            out.append((st["step"], tokens, d))
    return sorted({s[0]: s for s in out}.values())


def score(model: Path, files: Path, ext: str, mode: list[str], limit: int) -> dict:
    cmd = [sys.executable, "-m", "redraft.server.cli", "eval", "infill", "--files", str(files), "--ext", ext,
           "--model", str(model), "--kinds", "rest_of_line", "--limit", str(limit), "--seed", "1", "--json", *mode]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    row = json.loads(out.stdout)["kinds"]["rest_of_line"]
    return {"exact": row["exact_match"], "prefix": row["correct_prefix"],
            "copy_exact": row["copy"]["exact_match"], "copy_prefix": row["copy"]["correct_prefix"]}


def plot(points: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
    for ax, metric in zip(axes, ("exact", "prefix")):
        for lang in LANGS:
            for mode, style in (("model alone", "--"), ("server", "-")):
                xs = [p["tokens"] / 1e6 for p in points if (lang, mode) == (p["lang"], p["mode"])]
                ys = [p[metric] for p in points if (lang, mode) == (p["lang"], p["mode"])]
                if xs:
                    ax.plot(xs, ys, style, marker="o", label=f"{lang}, {mode}")
        ax.set_xlabel("tokens seen (M)")
        ax.set_ylabel("exact match" if metric == "exact" else "correct prefix")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7)
    fig.suptitle("rest of line on the validation packages")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True)
    ap.add_argument("--files", type=Path, required=True, help="the validation split's folder of language folders")
    ap.add_argument("--out", type=Path, required=True, help="the plot (PNG); the scores go beside it as .json")
    ap.add_argument("--limit", type=int, default=100, help="samples per language")
    args = ap.parse_args()
    store = args.out.with_suffix(".json")
    points = json.loads(store.read_text()) if store.is_file() else []
    # Keyed by tokens too: runs in one store (a restart, a conversion) reuse step numbers.
    done = {(p["step"], p["tokens"], p["lang"], p["mode"]) for p in points}
    for step, tokens, folder in snapshots(args.run):
        for lang, ext in LANGS.items():
            for mode, flags in MODES.items():
                if (step, tokens, lang, mode) in done or not (args.files / lang).is_dir():
                    continue
                got = score(folder, args.files / lang, ext, flags, args.limit)
                points.append(dict(step=step, tokens=tokens, lang=lang, mode=mode, **got))
                print(json.dumps(points[-1]), flush=True)
                store.write_text(json.dumps(points, indent=1) + "\n")
    plot(sorted(points, key=lambda p: p["tokens"]), args.out)


if __name__ == "__main__":
    main()
