"""The extra segment (definitions from other open documents) is built for the window the
engine takes, not for the `contextTokens` setting alone: built for the setting, definitions
that fit it but not the shipped model's smaller window made the whole segment too long, and
build() then dropped every one of them."""

from __future__ import annotations

from redraft.server.core.context import build, take_snapshot, window_tokens
from redraft.server.core.inference import Inference
from redraft.server.core.settings import ServerConfig
from redraft.server.lsp.session import Session


def definition(name: str) -> str:
    body = "".join(f"    total_{i} = sum(item.weight for item in items if item.size > {i})\n" for i in range(3))
    return f"def {name}(items, scale):\n{body}    return scale * (total_0 + total_1 + total_2)\n\n\n"


def test_definitions_from_other_documents_reach_the_engine_within_its_window():
    # A setting larger than the model's window (which the model's limit then cuts).
    config = ServerConfig(next_edit=False, workspace_files=False, context_tokens=1024)
    session = Session(config, Inference())
    try:
        assert session.inference.load(None, "cpu", "float32").result(timeout=120) is None
        engine = session.inference.engine
        limit = engine.context_budget(max(config.line_tokens, config.block_tokens))
        assert window_tokens(config, limit) < config.context_tokens  # the model's window is the smaller
        session.open("file:///lib.py", definition("weigh_first") + definition("weigh_second"), 1, "python")
        text = "from lib import weigh_first, weigh_second\n\nresult = weigh_first(parts, 2) + weigh_second("
        session.open("file:///main.py", text, 1, "python")
        st = session.docs["file:///main.py"]
        snap = session._enrich(st, take_snapshot(st.doc, 2, len(text.split("\n")[2]), config))
        assert "def weigh_first" in snap.extra  # at least one definition is offered
        ctx = build(snap, engine.count_tokens, limit)
        assert ctx.extra == snap.extra and "def weigh_first" in ctx.extra  # and survives the window
        assert engine.count_tokens(ctx.extra) <= window_tokens(config, limit) * config.extra_share
    finally:
        session.inference.shutdown()
