"""Imports point down the layers only: server fronts -> server core -> engine -> kernels.

Inside server/, the core (server/core) never imports a front end; the fronts (lsp, http,
eval) import the core and never each other; cluster (Ray Serve) builds on the core and the
HTTP front and only cli.py imports it; cli.py sits on top and may import them all.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RANK = {"server": 2, "engine": 1, "kernels": 0}
FRONTS = ("lsp", "http", "eval")
CLUSTER, CLUSTER_USES = "cluster", ("core", "http")


def _parse(source: str) -> ast.Module:
    # CPython 3.11's AST builder counts its depth per interpreter: a thread left running by an
    # earlier test that builds an AST at the same moment fails this one with a SystemError
    # (python/cpython#106905). A second try does not meet it.
    for _ in range(2):
        try:
            return ast.parse(source)
        except SystemError:
            pass
    return ast.parse(source)


def imported_modules(path: Path) -> list[str]:
    """Absolute dotted names of every module `path` imports (relative imports resolved
    against its place in the tree, `redraft.` dropped)."""
    package = list(path.relative_to(ROOT).parent.parts) if path.is_relative_to(ROOT) else []
    tree = _parse(path.read_text(encoding="utf-8"))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                up = package[:len(package) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            # `from . import x` imports module x: count each imported name as a submodule too
            names += [base] + ([f"{base}.{a.name}" for a in node.names] if node.level else [])
    out = []
    for name in names:
        parts = name.split(".")
        if parts[0] == "redraft" and len(parts) > 1:
            parts = parts[1:]
        out.append(".".join(parts))
    return out


def imported_layers(path: Path) -> set[str]:
    return {m.split(".")[0] for m in imported_modules(path) if m.split(".")[0] in RANK}


def back_edges() -> list[str]:
    bad = []
    for layer, rank in RANK.items():
        for path in sorted((ROOT / layer).rglob("*.py")):
            for target in imported_layers(path):
                if RANK[target] > rank:
                    bad.append(f"{path.relative_to(ROOT)} imports {target}")
    return bad


def server_part(module: str) -> str | None:
    """'server.lsp.session' -> 'lsp'; 'server.core.x' -> 'core'; 'server.cli' -> 'cli'."""
    parts = module.split(".")
    if parts[0] != "server" or len(parts) < 2:
        return None
    return parts[1]


def crossed_fronts() -> list[str]:
    bad: list[str] = []
    for path in sorted((ROOT / "server").rglob("*.py")):
        here = server_part(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for module in imported_modules(path):
            there = server_part(module)
            if there is None or there == here or here == "cli" or there == "__init__":
                continue
            if here == CLUSTER:
                wrong = there not in CLUSTER_USES
            else:
                wrong = here in (None, "__init__") or here == "core" or (here in FRONTS and there != "core")
            if wrong:
                line = f"{path.relative_to(ROOT)} imports server/{there}"
                if line not in bad:
                    bad.append(line)
    return bad


def import_cycles() -> list[list[str]]:
    """Groups of modules of the three layers that import each other, directly or around a
    loop (imports under `if TYPE_CHECKING:` count: they tie the modules all the same). A
    package's own `__init__` is left out: its modules import it by construction."""
    graph: dict[str, set[str]] = {}
    for layer in RANK:
        for path in sorted((ROOT / layer).rglob("*.py")):
            graph[".".join(path.relative_to(ROOT).with_suffix("").parts)] = set(imported_modules(path))
    for module in graph:
        graph[module] = {m for m in graph[module] if m in graph and m != module}
    cycles, seen = [], set()
    for module in sorted(graph):
        if module in seen:
            continue
        loop = {m for m in _reachable(graph, module) if module in _reachable(graph, m)}
        seen |= loop
        if loop:
            cycles.append(sorted(loop | {module}))
    return cycles


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    found, todo = set(), list(graph[start])
    while todo:
        m = todo.pop()
        if m not in found:
            found.add(m)
            todo.extend(graph[m])
    return found


def test_no_import_points_up_the_layers():
    assert back_edges() == []


def test_the_core_imports_no_front_and_fronts_not_each_other():
    assert crossed_fronts() == []
    for front in ("core", *FRONTS):
        assert list((ROOT / "server" / front).glob("*.py")), f"server/{front} is missing"


def test_the_scan_sees_a_back_edge(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from redraft.server.cli import main\nimport redraft.engine\n")
    assert imported_layers(probe) == {"server", "engine"}


def test_the_scan_sees_a_front_importing_another():
    probe = ROOT / "server" / "http" / "_probe_layers.py"
    probe.write_text("from ..lsp import session\nfrom ..core import context\n")
    try:
        assert crossed_fronts() == ["server/http/_probe_layers.py imports server/lsp"]
    finally:
        probe.unlink()


def test_the_scan_sees_cluster_reaching_past_http_and_core_reaching_cluster():
    probes = {ROOT / "server" / "cluster" / "_probe_layers.py": "from ..lsp import session\nfrom ..http import app\n",
              ROOT / "server" / "core" / "_probe_layers.py": "from ..cluster import batcher\n"}
    for path, text in probes.items():
        path.write_text(text)
    try:
        assert crossed_fronts() == ["server/cluster/_probe_layers.py imports server/lsp",
                                    "server/core/_probe_layers.py imports server/cluster"]
    finally:
        for path in probes:
            path.unlink()


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


def test_no_two_modules_import_each_other():
    """nextedit.py finds an edit's intents and sites.py follows them: both read `Intent` from
    intents.py rather than from each other."""
    assert import_cycles() == []


def test_the_scan_sees_an_import_cycle():
    probes = {ROOT / "server" / "core" / "_probe_a.py": "from . import _probe_b\n",
              ROOT / "server" / "core" / "_probe_b.py": "from typing import TYPE_CHECKING\n"
                                                          "if TYPE_CHECKING:\n    from ._probe_a import x\n"}
    for path, text in probes.items():
        path.write_text(text)
    try:
        assert import_cycles() == [["server.core._probe_a", "server.core._probe_b"]]
    finally:
        for path in probes:
            path.unlink()
