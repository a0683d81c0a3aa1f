"""Reading configuration input safely: a bounded YAML loader and a size check of plain data.

A configuration is a few dozen values. What reaches :func:`daskflow.config.validate` is bounded
before anything copies, prints or stores it:

- a YAML file is at most :data:`MAX_FILE_BYTES`; mappings and lists nest at most :data:`MAX_DEPTH`
  levels (an error, not a ``RecursionError``); the document holds at most :data:`MAX_NODES` values
  *counting every repetition of an alias* (a "billion laughs" document, where aliases of aliases
  expand to billions of items, is refused after composing its few hundred distinct nodes, before
  anything is constructed); an alias that contains itself is refused; a key given twice in one
  mapping is an error naming the key (YAML merge keys ``<<`` still work);
- numbers follow YAML 1.2 (its core schema): ``1e-3`` and ``2E5`` are floats, ``010`` is ten, ``0o10``
  eight, ``0x10`` sixteen; ``1:20`` and ``1_000`` are strings. PyYAML's ``SafeLoader`` follows YAML 1.1,
  where ``1e-3`` is a string (a float needs a dot and a signed exponent). Only this module's
  :class:`ConfigLoader` is changed, not PyYAML's global loaders. Nothing is executed: the loader is a
  ``yaml.SafeLoader`` (booleans, null and the rest stay as PyYAML reads them);
- a dict given directly (``Simulation({...})``) passes :func:`check_size`, the same size, depth and
  self-reference limits, with shared sub-lists counted as often as they are referenced.

Errors are one-line ``ValueError`` messages, ``config KEY: ...``, naming the key down to its first list
index.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

MAX_FILE_BYTES = 1 << 18  # a configuration is a few kilobytes; parsing 256 KiB takes at most ~0.1 s
MAX_NODES = 2000  # values and keys in all, every alias repetition counted (a configuration holds ~300)
MAX_DEPTH = 16  # levels of mappings and lists (a configuration nests five)

INT, FLOAT = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
#: YAML 1.2 core-schema numbers. YAML 1.1 (PyYAML's resolvers) reads ``1e-3`` and ``1.0e3`` as strings
#: (a float needs a dot and a signed exponent), ``010`` as 8, ``1:20`` as 80 and ``1_000`` as 1000.
INT_12 = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
FLOAT_12 = re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                      r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")


def key_name(key) -> str:
    """``key`` as a message names it: itself when a short printable string, else its ``repr`` cut short."""
    if isinstance(key, str) and key.isprintable() and len(key) <= 40:
        return key
    text = repr(key) if not isinstance(key, int) or abs(key) < 10**40 else "a very large integer"
    return text if len(text) <= 40 else f"{text[:37]}..."


def _join(path: str, key) -> str:
    return f"{path}.{key_name(key)}" if path else key_name(key)


def _label(path: str) -> str:
    """The key a message names: ``path`` down to its first list index."""
    return path.split("[", 1)[0] or "(root)"


class Refused(ValueError):
    """Input beyond this module's limits."""


def _refuse(path: str, message: str):
    raise Refused(f"config {_label(path)}: {message}")


def _measure(root, children) -> int:
    """The size of ``root`` with shared parts counted every time they are referenced (each shared
    part is walked once); refuses more than :data:`MAX_NODES`, deeper than :data:`MAX_DEPTH` and
    self-reference. ``children(node, path)`` lists ``(path, child)`` or is ``None`` for a leaf."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def visit(node, path: str, depth: int) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        items = children(node, path)
        if items is None:
            return 1
        if id(node) in active:
            _refuse(path, "contains itself (a recursive YAML alias or a self-referencing list)")
        if depth >= MAX_DEPTH:
            _refuse(path, f"nested more than {MAX_DEPTH} levels deep")
        active.add(id(node))
        total = 1
        for child_path, child in items:
            total += visit(child, child_path, depth + 1)
            if total > MAX_NODES:
                _refuse(path, f"holds more than {MAX_NODES} values in all (repeated aliases or shared lists "
                              "count every time they repeat; a configuration holds a few hundred)")
        active.discard(id(node))
        sizes[id(node)] = total
        return total

    return visit(root, "", 0)


def _data_children(value, path: str):
    if isinstance(value, dict):
        if len(value) > MAX_NODES:
            _refuse(path, f"holds more than {MAX_NODES} values")
        return [(_join(path, key), item) for key, item in value.items()]
    if isinstance(value, (list, tuple)):
        if len(value) > MAX_NODES:
            _refuse(path, f"holds more than {MAX_NODES} values")
        return [(f"{path}[{i}]", item) for i, item in enumerate(value)]
    return None


def check_size(config) -> int:
    """Refuse plain data (dicts, lists, tuples, scalars) beyond the limits above; returns its size."""
    return _measure(config, _data_children)


MERGE = "tag:yaml.org,2002:merge"


def _node_children(node, path: str):
    if isinstance(node, yaml.SequenceNode):
        return [(f"{path}[{i}]", item) for i, item in enumerate(node.value)]
    if not isinstance(node, yaml.MappingNode):
        return None
    seen: dict[tuple, str] = {}
    items = []
    for key, value in node.value:
        name = key.value if isinstance(key, yaml.ScalarNode) else "?"
        if isinstance(key, yaml.ScalarNode) and key.tag != MERGE:
            where = f"line {key.start_mark.line + 1}, column {key.start_mark.column + 1}"
            if (key.tag, key.value) in seen:
                _refuse(_join(path, name), f"duplicate key (at {seen[key.tag, key.value]} and {where}); give each "
                                           "key once")
            seen[key.tag, key.value] = where
        items += [(path, key), (_join(path, name), value)]
    return items


class ConfigLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with YAML 1.2 floats and the limits of this module."""

    def __init__(self, stream) -> None:
        super().__init__(stream)
        self._path: list[str] = []
        self._composed = 0

    def compose_node(self, parent, index):
        if isinstance(index, yaml.ScalarNode):
            step = _join(self._path[-1] if self._path else "", index.value)
        elif isinstance(index, int):
            step = f"{self._path[-1] if self._path else ''}[{index}]"
        else:  # the root, or a mapping's key
            step = self._path[-1] if self._path else ""
        self._composed += 1
        if len(self._path) > MAX_DEPTH:
            _refuse(step, f"nested more than {MAX_DEPTH} levels deep")
        if self._composed > MAX_NODES:
            _refuse(step, f"the file holds more than {MAX_NODES} values (a configuration holds a few hundred)")
        self._path.append(step)
        try:
            return super().compose_node(parent, index)
        finally:
            self._path.pop()

    def fetch_flow_collection_start(self, TokenClass):
        # The scanner reads up to 1024 characters ahead of the composer inside flow collections, at a cost
        # that grows with their nesting: "[[[[..." is refused here, where it is found (line, not key).
        if self.flow_level >= MAX_DEPTH:
            mark = self.get_mark()
            raise Refused(f"config (line {mark.line + 1}, column {mark.column + 1}): [ and {{ nested more than "
                          f"{MAX_DEPTH} levels deep")
        super().fetch_flow_collection_start(TokenClass)

    def compose_document(self):
        node = super().compose_document()
        _measure(node, _node_children)  # aliases expanded in the count, before anything is constructed
        return node


def _construct_int(loader: ConfigLoader, node) -> int:
    text = loader.construct_scalar(node)
    return int(text, 0) if text[:2] in ("0o", "0x") else int(text, 10)  # 010 is ten


# This class's own resolvers: SafeLoader's without its YAML 1.1 numbers, then the YAML 1.2 ones (ints
# first: every int also matches the float pattern). PyYAML's global loaders are left as they are.
ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (INT, FLOAT)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
ConfigLoader.add_implicit_resolver(INT, INT_12, list("-+0123456789"))
ConfigLoader.add_implicit_resolver(FLOAT, FLOAT_12, list("-+0123456789."))
ConfigLoader.add_constructor(INT, _construct_int)


def _one_line(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError):
        words = " ".join(part for part in (exc.context, exc.problem) if part)
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        return f"{words}{where}"
    return " ".join(str(exc).split())


def parse(text: str | bytes, name: str = "<string>"):
    """The data of one YAML document (``None`` when empty), within this module's limits."""
    if len(text) > MAX_FILE_BYTES:
        raise ValueError(f"config file {name!r}: larger than {MAX_FILE_BYTES} bytes (a configuration is a few "
                         "kilobytes)")
    try:
        return yaml.load(text, Loader=ConfigLoader)  # noqa: S506 - ConfigLoader is a SafeLoader
    except Refused:
        raise
    except yaml.YAMLError as exc:
        raise ValueError(f"config file {name!r} is not valid YAML: {_one_line(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - PyYAML's constructors let a bad tagged value through ("!!float x")
        raise ValueError(f"config file {name!r} is not valid YAML: a value cannot be read "
                         f"({type(exc).__name__}: {' '.join(str(exc).split())[:80]})") from None


def read(path: str | Path):
    """The data of the YAML file ``path`` (``None`` when empty), within this module's limits."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"config file {str(path)!r} does not exist")
    with path.open("rb") as fh:
        text = fh.read(MAX_FILE_BYTES + 1)  # never more than the limit in memory
    return parse(text, str(path))
