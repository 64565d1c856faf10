import pytest

import tiny
from redraft.engine import Engine


@pytest.fixture(scope="session")
def engines(tmp_path_factory):
    """Tiny random engines, one per attention style, loaded once (fp32 for exact comparisons)."""
    root = tmp_path_factory.mktemp("engines")
    return {f: Engine.load(tiny.make_family(root / f, f, seed=7), dtype="float32")
            for f in ("dream", "llada", "redraft", "redraft-ar")}
