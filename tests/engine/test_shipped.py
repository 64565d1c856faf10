"""The shipped default models load by name and complete code."""

import subprocess
import sys

import pytest

from redraft.engine import SHIPPED, Engine
from redraft.engine.dtypes import auto_dtype


@pytest.fixture(scope="module", params=SHIPPED)
def engine(request):
    return Engine.load(request.param)


def test_shipped_models_load_by_name(engine):
    cfg = engine.model_config
    assert cfg.family == "redraft" and cfg.shifted
    assert cfg.attention == ("causal" if engine.name == "redraft-ar" else "context_causal")
    params = sum(p.numel() for p in engine.model.parameters())
    assert 8e6 < params < 20e6


def test_shipped_models_complete_a_snippet(engine):
    prefix = "import os\n\n\ndef read_text(path):\n    with open(path) as f:\n        return f."
    out = engine.infill(prefix, "\n", sampler=engine.config.sampler.with_(span=16, min_score=float("-inf")))
    assert out.text.strip() and not out.abstained, out
    assert "<|" not in out.text
    assert out.stats.forwards >= 1 and out.stats.span_tokens == len(out.token_ids)


def test_abstains_below_min_score(engine):
    prefix = "import os\n\n\ndef read_text(path):\n    with open(path) as f:\n        return f."
    out = engine.infill(prefix, "\n", sampler=engine.config.sampler.with_(span=16, min_score=0.0))
    assert out.abstained and out.text == "" and out.token_ids == [] and out.score < 0.0


def test_complete_uses_the_default_model(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def add(a, b):\n    return \n")
    out = subprocess.run([sys.executable, "-m", "redraft.server.cli", "complete", f"{f}:2:12", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert '"model": "redraft-diffusion"' in out.stdout


def test_contexts_stay_within_the_trained_positions(engine):
    trained = engine.model_config.max_position_embeddings
    assert trained == 512
    long_prefix = "".join(f"value_{i} = compute({i}, {i + 1})\n" for i in range(400))
    out = engine.infill(long_prefix, "\n" * 50 + "x = 1\n", sampler=engine.config.sampler.with_(span=16))
    assert out.stats.context_tokens + 16 <= trained
    assert engine.context_budget(16) + 16 < trained


def test_info_describes_the_shipped_model(engine):
    info = engine.info()
    # bf16 where the CPU multiplies it natively, float32 elsewhere (auto_dtype)
    assert info.name == engine.name and info.dtype == auto_dtype("cpu") and 8e6 < info.parameters < 20e6
    assert info.scores_edits  # causal models too: teacher-forced (autoregressive.score_spans)
