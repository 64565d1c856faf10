"""The HTTP tests' engine: the tiny model loaded once per module, and a slowed, counted one."""

import time

import pytest

from redraft.server.core.inference import Inference


@pytest.fixture(scope="module")
def inference(tiny_model):
    inf = Inference()
    assert inf.load(str(tiny_model), "cpu", "float32").result() is None
    yield inf
    inf.shutdown()


@pytest.fixture
def slow_engine(inference):
    """Every model call takes `delay` seconds longer and is counted; the CancelFlag of each
    engine call is kept."""
    engine = inference.engine
    forward, infill = engine.model.forward, engine.infill
    state = {"delay": 0.4, "flags": [], "calls": 0}

    def slow_forward(*args, **kwargs):
        state["calls"] += 1
        time.sleep(state["delay"])
        return forward(*args, **kwargs)

    def spy(*args, **kwargs):
        state["flags"].append(kwargs.get("cancel"))
        return infill(*args, **kwargs)
    engine.model.forward, engine.infill = slow_forward, spy
    yield state
    del engine.model.forward, engine.infill
