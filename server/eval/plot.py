"""`redraft eval infill --plot FILE.png`: one figure of an infill report (infill.report).

Four panels, one group per kind: quality (exact match and correct prefix of the mode and of
the plain-copy baseline), latency (p50 / p95 ms, log scale, mode and copy), tokens per
forward of the mode, and tokens per forward against exact match. matplotlib is an optional
dependency (the `train` and `test` extras), imported only here and only when asked for, on
the Agg backend so no display is needed.
"""

from __future__ import annotations

from pathlib import Path

MODE_COLOR, COPY_COLOR = "#1f77b4", "#999999"


def check() -> None:
    """Raise ImportError now, before a long run, when matplotlib is missing."""
    import matplotlib  # noqa: F401


def plot_report(rep: dict, path: Path | str) -> None:
    """Write the report's figure to `path` (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = list(rep["kinds"])
    mode = rep.get("drafts", "mode")
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    _quality(axes[0][0], rep, kinds, mode)
    _latency(axes[0][1], rep, kinds, mode)
    _tokens_per_forward(axes[1][0], rep, kinds, mode)
    _scatter(axes[1][1], rep, kinds, mode)
    n = ", ".join(f"{k} {rep['kinds'][k]['n']}" for k in kinds)
    fig.suptitle(f"redraft eval infill: model {rep['model']}, drafts {mode}, {rep['files']} files, "
                 f"seed {rep['seed']} (n per kind: {n})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _value(s: dict, key: str) -> float:
    v = s.get(key)
    return 0.0 if v is None else float(v)


def _bars(ax, kinds: list[str], series: list[tuple[str, list[float], str, str]], fmt: str = "") -> None:
    """Grouped bars: per kind one bar of each (label, values, color, hatch) series, each
    labelled with its value when `fmt` is given."""
    width = 0.8 / len(series)
    for i, (label, values, color, hatch) in enumerate(series):
        xs = [k + (i - (len(series) - 1) / 2) * width for k in range(len(kinds))]
        bars = ax.bar(xs, values, width, label=label, color=color, hatch=hatch,
                      edgecolor="black" if hatch else "white")
        if fmt:
            ax.bar_label(bars, [fmt.format(v).lstrip("0") or "0" for v in values], fontsize=6, padding=1)
    _kind_axis(ax, kinds)


def _kind_axis(ax, kinds: list[str]) -> None:
    ax.set_xticks(range(len(kinds)), kinds)
    margin = 0.6 if len(kinds) > 2 else 1.0  # one kind alone is no wall of colour
    ax.set_xlim(-margin, len(kinds) - 1 + margin)


def _quality(ax, rep: dict, kinds: list[str], mode: str) -> None:
    rows = {k: rep["kinds"][k] for k in kinds}
    copy = {k: rows[k].get("copy", {}) for k in kinds}
    _bars(ax, kinds, [
        (f"{mode} exact", [_value(rows[k], "exact_match") for k in kinds], MODE_COLOR, ""),
        ("copy exact", [_value(copy[k], "exact_match") for k in kinds], COPY_COLOR, ""),
        (f"{mode} prefix", [_value(rows[k], "correct_prefix") for k in kinds], MODE_COLOR, "//"),
        ("copy prefix", [_value(copy[k], "correct_prefix") for k in kinds], COPY_COLOR, "//"),
    ], "{:.2f}")
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of samples / of expected chars")
    ax.set_title("quality: exact match and correct prefix")
    ax.legend(fontsize=8, ncol=2)


def _latency(ax, rep: dict, kinds: list[str], mode: str) -> None:
    rows = {k: rep["kinds"][k] for k in kinds}
    copy = {k: rows[k].get("copy", {}) for k in kinds}
    floor = 0.01  # ms: a log axis cannot show 0
    _bars(ax, kinds, [
        (f"{mode} p50", [max(_value(rows[k], "p50_ms"), floor) for k in kinds], MODE_COLOR, ""),
        (f"{mode} p95", [max(_value(rows[k], "p95_ms"), floor) for k in kinds], MODE_COLOR, "//"),
        ("copy p50", [max(_value(copy[k], "p50_ms"), floor) for k in kinds], COPY_COLOR, ""),
        ("copy p95", [max(_value(copy[k], "p95_ms"), floor) for k in kinds], COPY_COLOR, "//"),
    ])
    ax.set_yscale("log")
    ax.set_ylabel("ms per request (log)")
    ax.set_title("latency: p50 and p95")
    ax.legend(fontsize=8, ncol=2)


def _tokens_per_forward(ax, rep: dict, kinds: list[str], mode: str) -> None:
    values = [rep["kinds"][k].get("tokens_per_forward") for k in kinds]
    ax.bar(range(len(kinds)), [0.0 if v is None else v for v in values], 0.5, color=MODE_COLOR)
    for x, v in enumerate(values):
        ax.annotate("no model forwards" if v is None else f"{v:.2f}", (x, 0.0 if v is None else v),
                    ha="center", va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")
    _kind_axis(ax, kinds)
    ax.set_ylim(0, max([1.0] + [v * 1.15 for v in values if v is not None]))
    ax.set_ylabel("span tokens / denoising forward")
    ax.set_title(f"tokens per forward ({mode})")


def _scatter(ax, rep: dict, kinds: list[str], mode: str) -> None:
    shown = [(k, rep["kinds"][k]) for k in kinds if rep["kinds"][k].get("tokens_per_forward") is not None]
    for k, s in shown:
        ax.scatter(s["tokens_per_forward"], _value(s, "exact_match"), color=MODE_COLOR)
        ax.annotate(k, (s["tokens_per_forward"], _value(s, "exact_match")), fontsize=8, xytext=(4, 4),
                    textcoords="offset points")
    if not shown:
        ax.text(0.5, 0.5, "no model forwards", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylim(0, 1)
    ax.set_xlim(0, max([1.0] + [s["tokens_per_forward"] * 1.3 for _, s in shown]))  # room for the labels
    ax.set_xlabel("span tokens / denoising forward")
    ax.set_ylabel("exact match")
    ax.set_title(f"tokens per forward vs exact match ({mode}), per kind")
