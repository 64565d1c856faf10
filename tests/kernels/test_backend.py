"""The backend choice, launch counters, and that importing the kernels package stays cheap."""

from __future__ import annotations

import subprocess
import sys

import pytest

from redraft.kernels import backend, launch


def test_importing_the_package_never_imports_triton():
    code = ("import sys, redraft.kernels as k\n"
            "assert 'triton' not in sys.modules\n"
            "k.available(); k.backend.use_triton('cpu')\n"
            "assert 'triton' not in sys.modules\n"
            "assert k.span_attention.__name__ == 'redraft.kernels.span_attention'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_references_run_without_triton():
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, *a):\n"
            "        if name.split('.')[0] == 'triton':\n"
            "            raise ImportError('blocked ' + name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "import torch, redraft.kernels as k\n"
            "assert not k.available()\n"
            "ops = k.backend.ops('cpu')\n"
            "q = torch.randn(1, 4, 3, 16); kv = torch.randn(1, 2, 9, 16)\n"
            "assert ops.span_attention(q, kv, kv).shape == (1, 4, 3, 16)\n"
            "assert ops.head_confidence(torch.randn(2, 16), torch.randn(50, 16)).tokens.shape == (2,)\n"
            "try:\n"
            "    k.span_attention.span_attention(q, kv, kv)\n"
            "except RuntimeError as e:\n"
            "    assert 'triton' in str(e)\n"
            "else:\n"
            "    raise AssertionError('the launcher ran without triton')\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_use_triton_follows_the_device_and_the_override(monkeypatch):
    monkeypatch.delenv(backend.ENV, raising=False)
    assert backend.use_triton("cpu") is False
    monkeypatch.setenv(backend.ENV, "torch")
    assert backend.use_triton("cpu") is False and backend.use_triton("cuda") is False
    monkeypatch.setenv(backend.ENV, "bogus")
    with pytest.raises(ValueError):
        backend.use_triton("cpu")
    if backend.triton_installed():
        monkeypatch.setenv(backend.ENV, "triton")
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        assert backend.use_triton("cpu") is True
        assert backend.ops("cpu").triton is True
        monkeypatch.setenv("TRITON_INTERPRET", "0")
        with pytest.raises(RuntimeError):  # compiled Triton cannot run on CPU tensors
            backend.use_triton("cpu")


def test_counters_count():
    before = launch.launches["probe"]
    launch.count("probe")
    assert launch.launches["probe"] == before + 1


def test_imports_point_one_way():
    """backend chooses and imports the kernels; the kernels share launch, a leaf, and never
    import backend."""
    import ast
    from pathlib import Path
    folder = Path(launch.__file__).parent

    def package_imports(name: str) -> set[str]:
        tree = ast.parse((folder / f"{name}.py").read_text(encoding="utf-8"))
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                found |= {a.name for a in node.names} if node.module is None else {node.module}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("redraft"):
                found.add(node.module.split(".")[-1])
        return found

    assert package_imports("launch") == set()
    for op in ("span_attention", "head_confidence"):
        assert package_imports(op) == {"launch"}, op
    assert {"span_attention", "head_confidence"} <= package_imports("backend")
