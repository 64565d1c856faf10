import pytest

import tiny


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A random-weight model in redraft's own layout (causal context: keys/values reused per document)."""
    return tiny.make_family(tmp_path_factory.mktemp("lsp") / "redraft", "redraft")
