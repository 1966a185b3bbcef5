"""The floors of the house, checked on the import graph so they stay as DESIGN.md draws them.

Every ``import`` and ``from ... import`` of every module in modelfn's top-level packages
counts, wherever it stands (module level, inside a function, under ``TYPE_CHECKING``):
a lazy import is still a dependency. The rules:

- no cycle between packages;
- deploy and the local platform (``localstack``) never import each other, nor do the
  gateway and the local platform (both stand on ``platforms`` and ``net``), nor the
  gateway and the function's entry points (``handlers``: the gateway's server is the edge
  in ``net``);
- ``runtime`` imports no other modelfn package;
- ``protocol`` (the V2 wire) imports only ``runtime`` and ``net``;
- ``net`` imports only ``runtime`` (its errors and counters): never the wire above it;
- nothing outside ``cli`` imports ``cli``.

Each failure names the importing file and line.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: where the package list lives: the folders ``scripts/test`` links for mypy
PACKAGE_LOOP = re.compile(r"^for d in ([\w ]+); do", re.MULTILINE)
#: pairs of packages that must not import each other, in either direction
APART = (("localstack", "deploy"), ("localstack", "gateway"), ("gateway", "handlers"))


@dataclass(frozen=True)
class Edge:
    """``source`` (a package) imports ``target`` at ``path``:``line``."""

    source: str
    target: str
    path: str  # relative to the repository
    line: int
    imported: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: modelfn.{self.source} imports {self.imported}"


def packages(root: Path = ROOT) -> list[str]:
    """The top-level packages, as ``scripts/test`` lists them."""
    match = PACKAGE_LOOP.search((root / "scripts" / "test").read_text())
    assert match is not None, "scripts/test has no `for d in ...; do` loop of packages"
    return match.group(1).split()


def _module(root: Path, path: Path) -> list[str]:
    """``modelfn.<pkg>.<...>`` of ``path`` as parts; a package's ``__init__`` is the package."""
    parts = ["modelfn", *path.relative_to(root).with_suffix("").parts]
    return parts[:-1] if parts[-1] == "__init__" else parts


def _imported(node: ast.Import | ast.ImportFrom, module: list[str], is_package: bool
              ) -> list[str]:
    """The absolute names ``node`` imports."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        here = module if is_package else module[:-1]
        base = here[:len(here) - node.level + 1]
        name = ".".join([*base, *([node.module] if node.module else [])])
    else:
        name = node.module or ""
    if name == "modelfn":  # from modelfn import runtime
        return [f"modelfn.{alias.name}" for alias in node.names]
    return [name]


def edges(root: Path = ROOT) -> list[Edge]:
    """Every import from one top-level package into another."""
    names = packages(root)
    found: list[Edge] = []
    for package in names:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            module = _module(root, path)
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if not isinstance(node, ast.Import | ast.ImportFrom):
                    continue
                for imported in _imported(node, module, path.name == "__init__.py"):
                    parts = imported.split(".")
                    if len(parts) < 2 or parts[0] != "modelfn" or parts[1] == package:
                        continue
                    found.append(Edge(package, parts[1], str(path.relative_to(root)),
                                      node.lineno, imported))
    return found


def cycles(found: list[Edge]) -> list[list[str]]:
    """The strongly connected groups of more than one package (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {}
    for edge in found:
        graph.setdefault(edge.source, set()).add(edge.target)
        graph.setdefault(edge.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


@pytest.fixture(scope="module")
def graph() -> list[Edge]:
    return edges()


def _report(what: str, broken: list[Edge]) -> str:
    return f"{what}:\n" + "\n".join(f"  {edge}" for edge in broken)


def test_the_graph_sees_every_package_and_lazy_imports(graph: list[Edge]) -> None:
    """The check itself: all the packages are read, and imports inside functions count."""
    assert {"runtime", "protocol", "net", "cli", "deploy", "localstack", "platforms"
            } <= set(packages())
    assert any(edge.source == "cli" for edge in graph)
    sources = {edge.source for edge in graph}
    assert {"localstack", "deploy", "gateway"} <= sources


def test_no_cycle_between_packages(graph: list[Edge]) -> None:
    groups = cycles(graph)
    lines = []
    for group in groups:
        inside = [edge for edge in graph if edge.source in group and edge.target in group]
        lines.append(_report(f"packages {', '.join(group)} import each other", inside))
    assert not groups, "\n".join(lines)


@pytest.mark.parametrize(("one", "other"), APART)
def test_packages_that_stand_side_by_side_never_import_each_other(
    graph: list[Edge], one: str, other: str
) -> None:
    broken = [edge for edge in graph
              if {edge.source, edge.target} == {one, other}]
    assert not broken, _report(f"{one} and {other} stand on platforms, not on each other",
                               broken)


def test_runtime_imports_nothing_above_it(graph: list[Edge]) -> None:
    broken = [edge for edge in graph if edge.source == "runtime"]
    assert not broken, _report("runtime is the bottom floor", broken)


def test_the_wire_stands_on_the_engine_and_the_network_floor(graph: list[Edge]) -> None:
    broken = [edge for edge in graph
              if edge.source == "protocol" and edge.target not in {"runtime", "net"}]
    assert not broken, _report("protocol imports only runtime and net", broken)


def test_the_network_floor_stands_under_the_wire(graph: list[Edge]) -> None:
    broken = [edge for edge in graph if edge.source == "net" and edge.target != "runtime"]
    assert not broken, _report("net imports only runtime", broken)


def test_nothing_outside_cli_imports_cli(graph: list[Edge]) -> None:
    broken = [edge for edge in graph if edge.target == "cli"]
    assert not broken, _report("only cli imports cli", broken)


def test_an_import_inside_a_function_or_under_type_checking_counts(tmp_path: Path) -> None:
    """The graph counts what a lazy import needs, and resolves relative imports."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "test").write_text("for d in alpha beta; do\n  :\ndone\n")
    (tmp_path / "alpha").mkdir()
    (tmp_path / "beta").mkdir()
    (tmp_path / "alpha" / "__init__.py").write_text("")
    (tmp_path / "beta" / "__init__.py").write_text("")
    (tmp_path / "alpha" / "lazy.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from modelfn.beta import x\n"
        "def f():\n"
        "    import modelfn.beta.y\n"
        "    from .. import beta\n"
        "    from . import sibling\n")
    found = edges(tmp_path)
    assert [(e.source, e.target, e.line) for e in found] == [
        ("alpha", "beta", 3), ("alpha", "beta", 5), ("alpha", "beta", 6)]
    assert cycles(found) == []
