"""The package's import graph has no cycle, and the package folder itself stays small.

Every module under envmatrix/ is parsed (not imported) and each import of another envmatrix module is an
edge: relative imports resolved, imports inside functions counted (a cycle deferred to call time is
still a cycle in the design), `from package import name` pointing at the submodule when `name` is
one. Importing a.b.c also runs the `__init__` of a.b, so that package is an edge too, unless it
encloses the importer (its `__init__` has already started by then). Imports under `if TYPE_CHECKING:`
are left out: they never run (annotations only).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "envmatrix"
MAX_TOP_LEVEL_MODULES = 12


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_package(name: str) -> bool:
    return MODULES.get(name, Path()).name == "__init__.py"


def _resolve(importer: str, level: int, module: str | None) -> str:
    """The absolute name of `from <level dots><module> import ...` inside `importer`."""
    if level == 0:
        return module or ""
    base = importer.split(".") if _is_package(importer) else importer.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def _targets(importer: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    if isinstance(node, ast.Import):
        names = {alias.name for alias in node.names}
    else:
        source = _resolve(importer, node.level, node.module)
        names = {f"{source}.{a.name}" if f"{source}.{a.name}" in MODULES else source for a in node.names}
    found = set()
    for name in names:
        while name and name not in MODULES:  # `import envmatrix.x.y as z` names a module; an attribute falls back to its module
            name = name.rpartition(".")[0]
        if name.startswith("envmatrix"):
            found.add(name)
            parts = name.split(".")
            found |= {".".join(parts[:i]) for i in range(1, len(parts)) if not (importer + ".").startswith(".".join(parts[:i]) + ".")}
    found.discard(importer)
    return found


def _imports(node: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement under `node`, but those in an `if TYPE_CHECKING:` body (never executed)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [node]
    if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
        return [n for child in node.orelse for n in _imports(child)]
    return [n for child in ast.iter_child_nodes(node) for n in _imports(child)]


def import_graph() -> dict[str, set[str]]:
    """Module → the envmatrix modules it imports (anywhere in its source)."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[name] = set().union(*(_targets(name, n) for n in _imports(tree)))
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan), each as a path back to its start."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_in(graph, component) for component in components]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first, inside the component)."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    return sorted(component)


def test_the_graph_sees_relative_function_level_and_package_imports() -> None:
    graph = import_graph()
    assert "envmatrix.records.outcomes" in graph["envmatrix.records.record"]  # from .outcomes import ...
    assert "envmatrix.answers.bisect_run" in graph["envmatrix.cli.bisect"]  # inside a function
    assert "envmatrix.backends" in graph["envmatrix.run.runner"]  # from ..backends import Backend: the package's __init__
    assert "envmatrix" in graph["envmatrix.cli"]  # from .. import __version__
    assert "envmatrix.plan.cells" not in graph["envmatrix.facts.pkgconstraints"]  # under TYPE_CHECKING
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_no_import_cycle() -> None:
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_package_folder_holds_few_modules() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
