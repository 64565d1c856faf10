"""The static denoising step (engine/step.py): the dynamic step's tokens, no host sync inside,
one capture per shape bucket; on a CUDA device, the captured graph replays the eager step."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import tiny
from redraft.engine import Engine, EngineConfig, SamplerConfig
from redraft.engine.batch import encode_context, make_batch
from redraft.engine.layout import build_row
from redraft.engine.step import BUCKET, MAX_STEPS_KEPT

PROMPTS = [("def add(a, b):\n    return ", "\n\n\nclass Point:\n"),
           ("for i in range(", "):\n    print(i)\n"),
           ("import os\nimport sys\n\nprint(sys.arg", ")\n")]  # ends mid-word: healing constrains span[0]
GREEDY = SamplerConfig(span=6, threshold=0.5)


def static_twin(engine: Engine) -> Engine:
    """The same model and tokenizer with static steps forced on (run eagerly on a CPU)."""
    return Engine(engine.model, engine.tokenizer, replace(engine.config, step_graphs="on"), name=engine.name,
                  path=engine.path)


def runs(engine: Engine) -> int:
    return sum(s.runs for s in engine.steps._steps.values())


@pytest.mark.parametrize("family", ["redraft", "dream", "llada"])
@pytest.mark.parametrize("sampler", [GREEDY, GREEDY.with_(lengths=(3, 6, 9)), GREEDY.with_(block_size=2)],
                         ids=["one-length", "three-lengths", "blocks"])
def test_static_step_gives_the_dynamic_tokens(engines, family, sampler):
    plain = engines[family]
    assert plain.steps is None  # auto: static steps on CUDA only
    static = static_twin(plain)
    for prefix, suffix in PROMPTS:
        for drafts in ((), ("a + b", "b - a")):
            before = runs(static)
            a = plain.infill(prefix, suffix, drafts=drafts, sampler=sampler, cache_key="plain")
            b = static.infill(prefix, suffix, drafts=drafts, sampler=sampler, cache_key="static")
            assert a.token_ids == b.token_ids, (family, prefix, drafts, a.text, b.text)
            assert a.stats.steps == b.stats.steps
            if a.stats.steps > (1 if drafts else 0):  # something was denoised after judging
                assert runs(static) > before, "the static step did not run"


def test_streamed_previews_and_stop_rule_see_the_same_steps(engines):
    plain, static = engines["redraft"], static_twin(engines["redraft"])
    seen = {"plain": [], "static": []}
    for name, e in (("plain", plain), ("static", static)):
        out = e.infill("def add(a, b):\n    return ", "\n", sampler=GREEDY.with_(span=12, threshold=1.0, block_size=1),
                       on_preview=lambda p, name=name: seen[name].append((p.step, p.text, p.masked)),
                       stop=lambda text: len(text) >= 8, cache_key=name)
        seen[name].append(out.text)
    assert seen["plain"] == seen["static"] and len(seen["plain"]) > 2


def test_sampling_keeps_the_dynamic_step(engines):
    static = static_twin(engines["redraft"])
    static.infill("x = ", "\n", sampler=GREEDY.with_(temperature=0.8))
    assert runs(static) == 0  # the whole distribution is needed: not the fused greedy head


def test_nearby_context_lengths_share_one_capture(engines):
    e = static_twin(engines["redraft"])
    cfg = e.model_config
    with torch.inference_mode():
        for n in (40, 45, 41):
            batch = make_batch([build_row(cfg, list(range(10, 10 + n)), [5, 6], [], 6)], e._pad_id, "cpu")
            kv, _ = encode_context(e.model, batch, None, extra=batch.A)
            e.steps.prepare(batch, kv, "maxprob")
        assert len(e.steps) == 1
        for n in range(1, MAX_STEPS_KEPT + 3):  # other buckets: the oldest are dropped
            batch = make_batch([build_row(cfg, [7] * (n * BUCKET - 8), [], [], 6)], e._pad_id, "cpu")
            kv, _ = encode_context(e.model, batch, None, extra=batch.A)
            e.steps.prepare(batch, kv, "maxprob")
        assert len(e.steps) == MAX_STEPS_KEPT


def _loaded_step(engine: Engine):
    cfg = engine.model_config
    batch = make_batch([build_row(cfg, list(range(10, 60)), list(range(60, 70)), [], 6)] * 2, engine._pad_id,
                       engine.device)
    kv, _ = encode_context(engine.model, batch, None, extra=batch.A)
    return engine.steps.prepare(batch, kv, "maxprob"), batch


def test_the_step_reads_nothing_back_from_the_device(engines):
    """TorchDynamo traces the whole step as one graph only if nothing in it needs a value on
    the host (`.item()`, `int(t)`, data-dependent shapes): the same property a CUDA graph
    capture needs. Reading the largest position back (no `pos_limit`) must break it."""
    e = static_twin(engines["redraft"])
    with torch.no_grad():
        step, _ = _loaded_step(e)
        torch._dynamo.reset()
        _, packed = torch.compile(step._forward, fullgraph=True, backend="eager", dynamic=False)()
        assert packed.shape == (4, 2, step.A)
        step.rope_limit = None  # the check itself can fail
        torch._dynamo.reset()
        with pytest.raises(Exception, match="data-dependent"):
            torch.compile(step._forward, fullgraph=True, backend="eager", dynamic=False)()
    torch._dynamo.reset()


def test_a_failed_capture_falls_back_to_the_eager_step(engines, monkeypatch, caplog):
    e = static_twin(engines["redraft"])
    with torch.inference_mode():
        step, batch = _loaded_step(e)
        _, expected = step.run(batch.act_ids.cpu())

        def refuse():
            raise RuntimeError("operation not permitted when stream is capturing")

        monkeypatch.setattr(step, "_capture", refuse)
        step.capture = True  # as on a CUDA device
        _, packed = step.run(batch.act_ids.cpu())
    assert torch.equal(packed, expected) and not step.capture
    assert "capture failed" in caplog.text and "not permitted" in step.failure


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_graph_replays_the_eager_step(tmp_path):
    folder = tiny.make_family(tmp_path / "redraft", "redraft", seed=7)
    graphs = Engine.load(folder, device="cuda", dtype="float32", config=EngineConfig(step_graphs="auto"))
    eager = Engine.load(folder, device="cuda", dtype="float32", config=EngineConfig(step_graphs="off"))
    assert graphs.steps is not None and graphs.steps.capture
    for prefix, suffix in PROMPTS:
        a = eager.infill(prefix, suffix, sampler=GREEDY)
        b = graphs.infill(prefix, suffix, sampler=GREEDY)
        assert a.token_ids == b.token_ids, (prefix, a.text, b.text)
    assert runs(graphs) > 0 and all(s.graph is not None for s in graphs.steps._steps.values())
    # replay against an eager run of the same loaded step: the same numbers
    with torch.inference_mode():
        step, batch = _loaded_step(graphs)
        x = batch.act_ids.cpu()
        _, replayed = step.run(x)
        _, packed = step._forward()
        assert torch.equal(replayed, packed.cpu())
