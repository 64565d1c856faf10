"""Imports point down the layers only: server -> engine -> kernels."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RANK = {"server": 2, "engine": 1, "kernels": 0}


def imported_layers(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    out = set()
    for name in names:
        parts = name.split(".")
        if parts[0] == "redraft" and len(parts) > 1:
            parts = parts[1:]
        if parts[0] in RANK:
            out.add(parts[0])
    return out


def back_edges() -> list[str]:
    bad = []
    for layer, rank in RANK.items():
        for path in sorted((ROOT / layer).rglob("*.py")):
            for target in imported_layers(path):
                if RANK[target] > rank:
                    bad.append(f"{path.relative_to(ROOT)} imports {target}")
    return bad


def test_no_import_points_up_the_layers():
    assert back_edges() == []


def test_the_scan_sees_a_back_edge(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from redraft.server.cli import main\nimport redraft.engine\n")
    assert imported_layers(probe) == {"server", "engine"}


def test_engine_and_kernels_import_without_server_dependencies():
    """The GPU machine has no pygls or tree-sitter: the engine must not need them."""
    import subprocess
    import sys
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, *a):\n"
            "        if name.split('.')[0] in ('pygls', 'lsprotocol', 'tree_sitter', 'tree_sitter_language_pack'):\n"
            "            raise ImportError('blocked ' + name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "import redraft.engine, redraft.kernels\n")
    subprocess.run([sys.executable, "-c", code], check=True)
