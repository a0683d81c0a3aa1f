"""The package's imports form a tree: every ``import`` of a daskflow module, function-local ones
included, read from the source; no circle, and no private name imported from another package. And
its modules and functions stay small: no module over 500 lines, no function over 60 lines except
the numeric kernels named below."""

import ast
from pathlib import Path

import daskflow

ROOT = Path(daskflow.__file__).parent


def _modules(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
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


MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
#: numeric kernels allowed over MAX_FUNCTION_LINES ("module:function" -> why it stays one function); none
#: is today: every kernel of daskflow (tridiagonal.kernels, ns.cpu_kernels, ns.advection, ...) fits
NUMERIC_KERNELS: dict[str, str] = {}


def _function_lengths(tree: ast.Module) -> dict[str, int]:
    """``{qualified name: lines from its def to its last line}`` of every function of a module: methods
    as ``Class.name``, nested functions as ``outer.name`` (counted in their outer function as well)."""
    out = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    out[name] = child.end_lineno - child.lineno + 1
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def oversized(root: Path = ROOT) -> tuple[dict[str, int], dict[str, int]]:
    """The modules over :data:`MAX_MODULE_LINES` (``{module: lines}``) and the functions over
    :data:`MAX_FUNCTION_LINES` (``{"module:function": lines}``) of the package at ``root``."""
    modules, functions = {}, {}
    for module, path in sorted(_modules(root).items()):
        source = path.read_text()
        if len(source.splitlines()) > MAX_MODULE_LINES:
            modules[module] = len(source.splitlines())
        for name, lines in _function_lengths(ast.parse(source)).items():
            if lines > MAX_FUNCTION_LINES:
                functions[f"{module}:{name}"] = lines
    return modules, functions


def test_no_module_or_function_is_too_long():
    modules, functions = oversized()
    assert modules == {}, f"split these modules by concept (at most {MAX_MODULE_LINES} lines each)"
    too_long = {name: lines for name, lines in functions.items() if name not in NUMERIC_KERNELS}
    assert too_long == {}, f"break these functions into named helpers (at most {MAX_FUNCTION_LINES} lines each)"
    assert set(NUMERIC_KERNELS) <= set(functions), "an allowed kernel is gone or short now: drop it from the list"


def test_the_length_check_finds_a_long_function_and_module(tmp_path):
    """The check above can fail: a 61-line function, a nested one and a 501-line module are found; a
    60-line function and a 500-line module are not."""
    package = tmp_path / "pkg"
    package.mkdir()

    def module(*blocks: list[str], lines: int) -> str:
        code = [line for block in blocks for line in block]
        return "\n".join(code + ["# filler"] * (lines - len(code))) + "\n"

    fits = ["def fits():", *["    x = 0"] * 59]
    method = ["class A:", "    def method(self):", *["        x = 0"] * 60]
    nested = ["def outer():", "    def inner():", *["        x = 0"] * 60]
    (package / "__init__.py").write_text(module(fits, lines=500))
    (package / "long.py").write_text(module(method, nested, lines=501))
    modules, functions = oversized(package)
    assert modules == {"pkg.long": 501}
    assert functions == {"pkg.long:A.method": 61, "pkg.long:outer": 62, "pkg.long:outer.inner": 61}
