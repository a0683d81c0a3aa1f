"""The package's imports form a tree: every ``import`` of a daskflow module, function-local ones
included, read from the source; no circle, and no private name imported from another package."""

import ast
from pathlib import Path

import daskflow

ROOT = Path(daskflow.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _target(name: str, modules: dict) -> str | None:
    """The daskflow module an imported dotted name belongs to (the longest module prefix)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in modules:
            return ".".join(parts[:i])
    return None


def import_graph() -> tuple[dict[str, set[str]], list[tuple[str, str, str]]]:
    """``{module: modules it imports}`` and the private names imported across packages."""
    modules = _modules()
    graph, private = {m: set() for m in modules}, []
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [(alias.name, None) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                names = [(f"{base}.{alias.name}", alias.name) for alias in node.names]
            else:
                continue
            for dotted, short in names:
                target = _target(dotted, modules)
                if target is None or target == module:
                    continue
                graph[module].add(target)
                if short is not None and short.startswith("_") and not short.startswith("__"):
                    if target.rpartition(".")[0] != package:
                        private.append((module, target, short))
    return graph, private


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_imports_form_a_tree():
    graph, private = import_graph()
    assert len(graph) > 40 and graph["daskflow.simulation"]  # the walk saw the package
    assert cycles(graph) == []
    assert private == []


def test_the_walk_finds_a_circle_and_a_private_import():
    """The checks above can fail: a circle through a function-local import is found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
