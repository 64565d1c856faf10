"""`redraft eval infill` and `redraft eval next-edit`: their options and how they run (the
evaluations themselves live in server/eval). Like every command, they import what they use
when they run."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from .cli_common import EXIT_USAGE, UserError, cache_arg, load_engine, model_args, names_arg, print_json


def eval_parser(sub) -> None:
    ev = sub.add_parser("eval", help="offline evaluations of a model")
    ev.set_defaults(run=lambda _: (ev.print_help(), EXIT_USAGE)[1], quick_exit=True)
    tasks = ev.add_subparsers(metavar="TASK")
    ei = tasks.add_parser("infill", help="infill at sampled cursor positions of the Python files under DIR")
    _eval_args(ei, "cursor samples", "rest_of_line,next_line,block,node")
    ei.add_argument("--drafts", choices=["seeded", "only", "off"], default="seeded",
                    help="drafts from the same file: seed the model (the server's default), alone, or off")
    cache_arg(ei)
    names_arg(ei)
    ei.add_argument("--workspace", action="store_true",
                    help="drafts also from the other files of each sample's package (the first folder under "
                         "DIR), as the server's come from the workspace when the client names a root")
    ei.add_argument("--ext", default=".py", metavar="EXTS",
                    help="comma-separated file name endings to sample from (default .py; e.g. .ts,.go,.rs)")
    ei.add_argument("--twin", default=None, metavar="MODEL",
                    help="also run this model (e.g. redraft-ar) on the same samples with the same settings, each "
                         "sample answered by both in turn, and report it beside the model: generate time as a "
                         "ratio, quality in points")
    ei.add_argument("--twin-lookup", choices=("on", "off"), default="on",
                    help="the causal twin verifies drafts by prompt-lookup decoding (on, as served) or decodes "
                         "token by token (off: plain autoregressive decoding, for 'model alone' figures)")
    ei.add_argument("--threshold", type=float, default=None, metavar="P",
                    help="the diffusion model's commit threshold (the server's `threshold` setting; default: the "
                         "model's own): a masked position commits once its probability reaches P")
    ei.add_argument("--min-score", type=float, default=None, metavar="S",
                    help="the model's abstention bar: an answer whose mean log-probability is below S is not "
                         "shown (default: the model's own `min_score`; the twin keeps its own), to calibrate it")
    ei.add_argument("--context-tokens", type=int, default=None, metavar="N",
                    help="the prefix + suffix window budget in tokens (the server's `contextTokens` setting; "
                         "default the server's, capped by what the model was trained on)")
    ei.add_argument("--spans", choices=("kind", "server"), default="kind",
                    help="span budgets: each kind's, with room for its whole expected text (default), or "
                         "the server's own (lineTokens 16, blockTokens 48), as users get them")
    ei.add_argument("--verify-blocks", action="store_true",
                    help="block-causal models: check each committed block against the clean stream "
                         "(engine/blockwise.py; the text is then the clean stream's greedy decoding)")
    ei.add_argument("--self-draft", choices=("on", "off"), default=None,
                    help="block-causal models: each forward checks drafts with the clean stream and writes the "
                         "next ones with the noisy blocks (engine/drafting.py; default: the model's own setting)")
    ei.add_argument("--draft-block", type=int, default=None, metavar="N",
                    help="self-drafting: the pre-draft block in positions (N - 1 drafts a forward; 1: none, "
                         "lookup drafts only; default the model's own)")
    ei.add_argument("--draft-floor", type=float, default=None, metavar="P",
                    help="self-drafting: drafts stop before the first token under probability P (default: the "
                         "model's own)")
    ei.add_argument("--lookup", choices=("on", "off"), default="on",
                    help="self-drafting models take prompt-lookup drafts first (on, as served) or only their "
                         "own (off: 'model alone')")
    ei.add_argument("--span-window", choices=("on", "off"), default=None,
                    help="after the first, diffusion steps run only the open block's window of the span, "
                         "attending to what is before it (default: the model's own setting)")
    ei.add_argument("--window-refresh", type=int, default=None, metavar="R",
                    help="with span windows, every R-th step runs the whole span again (0: only the first)")
    ei.add_argument("--window-lookup", choices=("on", "off"), default=None,
                    help="with span windows, prompt-lookup proposals judged in the window (default: the model's "
                         "own setting; off: 'model alone', as --twin-lookup off for the twin)")
    ei.add_argument("--window-guesses", type=int, default=None, metavar="N",
                    help="a context-causal model's own guesses proposed in its span windows where lookup proposes "
                         "nothing, up to N (0 = off; default: the model's sampler)")
    ei.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ei.add_argument("--plot", type=Path, default=None, metavar="FILE.png",
                    help="also draw quality, latency and tokens per forward per kind (needs matplotlib)")
    ei.set_defaults(run=_eval_infill)

    ne = tasks.add_parser("next-edit", help="next-edit scenarios made from the Python files under DIR (renames, "
                                            "added parameters, repeated literals), or real edits (--releases)")
    _eval_args(ne, "scenarios", "rename_param,rename_local,add_param,literal", files_required=False)
    ne.add_argument("--releases", nargs="+", type=Path, metavar="DIR",
                    help="real edits instead: OLD_DIR NEW_DIR (two releases of one package), or a ROOT of "
                         "NAME/VERSION folders (python -m redraft.server.eval.releases fetch ROOT); --limit is "
                         "then scenarios per package")
    ne.add_argument("--margin", type=float, default=None,
                    help="drop a proposal the model likes less than the text as it is by more than this "
                         "(mean log-prob; default: the server's)")
    ne.add_argument("--no-model", action="store_true", help="the proposals alone, without the model's judgement")
    ne.add_argument("--refill", action="store_true",
                    help="with --releases: where no rule applies, the model rewrites the line after the edit "
                         "(the nextEditRefill setting)")
    ne.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ne.set_defaults(run=_eval_next_edit)


def _eval_args(p: argparse.ArgumentParser, what: str, kinds: str, files_required: bool = True) -> None:
    p.add_argument("--files", required=files_required, type=Path, metavar="DIR", help="folder searched for source files")
    model_args(p)
    p.add_argument("--limit", type=int, default=100, help=f"{what} per kind (default 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kinds", default=None, help=f"comma-separated kinds (default {kinds})")


def _eval_infill(args) -> int:
    from .eval.infill import format_table, parse_kinds, report, run_side_by_side, with_twin
    from .eval.samples import load_sources
    from .core.settings import ServerConfig
    try:
        kinds = parse_kinds(args.kinds)
    except ValueError as e:
        raise UserError(str(e)) from None
    if args.limit < 1:
        raise UserError(f"--limit must be at least 1, got {args.limit}")
    if not args.files.is_dir():
        raise UserError(f"{args.files}: not a folder")
    sources, skipped = load_sources(args.files, tuple(e if e.startswith(".") else "." + e
                                                      for e in args.ext.split(",") if e))
    for path in skipped:
        print(f"redraft: skipping {path} (not UTF-8 text)", file=sys.stderr)
    if not sources:
        raise UserError(f"{args.files}: no readable *.py files")
    if args.plot is not None:
        _check_plot(args.plot)
    engine = None if args.drafts == "only" else load_engine(args)
    if args.twin is not None and engine is None:
        raise UserError("--twin compares two models: not with --drafts only")
    twin = None if args.twin is None else load_engine(argparse.Namespace(**{**vars(args), "model": args.twin}))
    if args.threshold is not None and not 0.0 <= args.threshold <= 1.0:
        raise UserError(f"--threshold must be in [0, 1], got {args.threshold}")
    if args.min_score is not None and not math.isfinite(args.min_score):
        raise UserError(f"--min-score must be a finite number, got {args.min_score}")
    if args.context_tokens is not None and args.context_tokens < 16:
        raise UserError(f"--context-tokens must be at least 16, got {args.context_tokens}")
    if args.draft_block is not None and not 0 <= args.draft_block <= 64:
        raise UserError(f"--draft-block must be in 0..64, got {args.draft_block}")
    if args.draft_floor is not None and not 0.0 <= args.draft_floor <= 1.0:
        raise UserError(f"--draft-floor must be in [0, 1], got {args.draft_floor}")
    if args.window_refresh is not None and args.window_refresh < 0:
        raise UserError(f"--window-refresh must be at least 0, got {args.window_refresh}")
    window = {} if args.context_tokens is None else {"context_tokens": args.context_tokens}
    steps = {} if args.span_window is None else {"span_window": args.span_window == "on"}
    if args.window_refresh is not None:
        steps["window_refresh"] = args.window_refresh
    if args.window_lookup is not None:
        steps["window_lookup"] = args.window_lookup == "on"
    if args.window_guesses is not None:
        if not 0 <= args.window_guesses <= 16:
            raise UserError(f"--window-guesses must be in 0..16, got {args.window_guesses}")
        steps["window_guesses"] = args.window_guesses
    config = ServerConfig(drafts=args.drafts, cache=args.cache == "on", names=args.names == "on",
                          threshold=args.threshold, **window)
    if engine is not None and args.min_score is not None:
        engine.with_sampler(min_score=args.min_score)
    sides = (engine, twin) if twin is not None else (engine,)
    for one in sides:
        if one is not None:
            one.with_sampler(seed=args.seed, verify_blocks=args.verify_blocks,
                             **(steps if one.model.config.attention == "context_causal" else {}))
            if one.model.config.attention == "causal":
                one.with_sampler(lookup=args.twin_lookup == "on")
            if one.model.config.attention == "block_causal":
                one.with_sampler(lookup=args.lookup == "on",
                                 **({} if args.self_draft is None else {"self_draft": args.self_draft == "on"}),
                                 **({} if args.draft_block is None else {"draft_block": args.draft_block}),
                                 **({} if args.draft_floor is None else {"draft_floor": args.draft_floor}))
    # One run, the twin answering each sample beside the model: their times compare.
    answered = run_side_by_side(list(sides), sources, kinds, args.limit, args.seed, config, workspace=args.workspace,
                                spans=args.spans)
    rep = None
    for one, outcomes in zip(sides, answered):
        r = report("drafts" if one is None else one.name, sources, args.seed, outcomes, args.drafts,
                   args.workspace, args.names == "on")
        rep = r if rep is None else with_twin(rep, r)
    if args.json:
        print_json(rep)
    else:
        print(format_table(rep))
    if args.plot is not None:
        from .eval.plot import plot_report
        plot_report(rep, args.plot)
    return 0


def _check_plot(path: Path) -> None:
    """Fail before the run, not after it, when the figure cannot be written."""
    from .eval.plot import check
    try:
        check()
    except ImportError:
        raise UserError("--plot needs matplotlib (pip install 'redraft[train]')") from None
    if not path.parent.is_dir():
        raise UserError(f"--plot {path}: no folder {path.parent}")


def _eval_next_edit(args) -> int:
    if args.releases is not None:
        return _eval_releases(args)
    if args.files is None:
        raise UserError("next-edit needs --files DIR or --releases")
    from .eval.nextedit import KINDS, run
    from .eval.samples import load_sources
    from .core.settings import ServerConfig
    kinds = list(KINDS) if args.kinds is None else [k.strip() for k in args.kinds.split(",") if k.strip()]
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise UserError(f"unknown kind(s) {', '.join(bad) or repr(args.kinds)} (choose from {', '.join(KINDS)})")
    if args.limit < 1:
        raise UserError(f"--limit must be at least 1, got {args.limit}")
    if not args.files.is_dir():
        raise UserError(f"{args.files}: not a folder")
    sources, _ = load_sources(args.files)
    if not sources:
        raise UserError(f"{args.files}: no readable *.py files")
    engine = None if args.no_model else load_engine(args)
    margin = ServerConfig().edit_margin if args.margin is None else args.margin
    rep = {"model": None if engine is None else engine.name, "files": len(sources), "seed": args.seed,
           "margin": margin, "kinds": run(engine, sources, kinds, args.limit, args.seed, margin)}
    if args.json:
        print_json(rep)
    else:
        print(f"model {rep['model']}, {rep['files']} files, seed {args.seed}, margin {margin}")
        print(f"{'kind':14} {'n':>4} {'precision':>9} {'recall':>7} {'reversal':>8} {'p50_ms':>8} {'p95_ms':>8}")
        for kind, r in rep["kinds"].items():
            def f(v, fmt):
                return "-" if v is None else format(v, fmt)
            print(f"{kind:14} {r['n']:>4} {f(r['precision'], '.3f'):>9} {f(r['recall'], '.3f'):>7} "
                  f"{f(r['reversal_ratio'], '.3f'):>8} {f(r['p50_ms'], '.1f'):>8} {f(r.get('p95_ms'), '.1f'):>8}")
    return 0


def _eval_releases(args) -> int:
    from .core.settings import ServerConfig
    from .eval.releases import format_table, run
    if len(args.releases) > 2:
        raise UserError("--releases takes OLD_DIR NEW_DIR, or one ROOT of NAME/VERSION folders")
    if args.limit < 1:
        raise UserError(f"--limit must be at least 1, got {args.limit}")
    for d in args.releases:
        if not d.is_dir():
            raise UserError(f"{d}: not a folder")
    engine = None if args.no_model else load_engine(args)
    margin = ServerConfig().edit_margin if args.margin is None else args.margin
    try:
        rep = run(args.releases[0], args.releases[1] if len(args.releases) == 2 else None, engine,
                  args.limit, args.seed, margin, args.refill)
    except ValueError as e:
        raise UserError(str(e)) from None
    if args.json:
        print_json(rep)
    else:
        print(format_table(rep))
    return 0
