"""Where a run's store lives and the two views of it: the live arrays its writers open, and the
committed view readers get, which :func:`commit` moves forward (see :mod:`daskflow.io.store`)."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable
from pathlib import Path

import zarr


def is_local(path: str) -> bool:
    """A plain path or ``file://`` URL (other fsspec URLs go through zarr's fsspec store)."""
    return "://" not in str(path) or str(path).startswith("file://")


def exists(path: str) -> bool:
    """Whether something is at ``path`` (a local path, or an fsspec URL)."""
    if is_local(path):
        return Path(str(path).removeprefix("file://")).exists()
    import fsspec

    fs, root = fsspec.core.url_to_fs(str(path))
    return fs.exists(root)


def open_for_write(path: str):
    """The root group with the live (not the committed) metadata, for the run's writers."""
    return zarr.open_group(path, mode="r+", use_consolidated=False)


def commit(path: str, changed: Iterable[str] | None = None) -> None:
    """Make everything written so far visible to readers: consolidate the metadata at the root (one
    atomic write of the root ``zarr.json``). Only one writer commits: the run's first participant,
    or the client outside a run.

    ``changed`` names the groups (paths from the root, such as ``"scalars"``) under which alone
    metadata changed since the last commit. On a local store whose root already holds consolidated
    metadata, only their nodes' ``zarr.json`` are re-read into it: a few small files per commit
    instead of every node of the store (about 0.1 s each at every flush of a run's records)."""
    if changed is not None and is_local(path) and _recommit(Path(str(path).removeprefix("file://")), set(changed)):
        return
    with warnings.catch_warnings():  # zarr notes that consolidation is not in the v3 spec yet, and that
        warnings.simplefilter("ignore")  # checkpoint/CURRENT is not a zarr node
        zarr.consolidate_metadata(path)


_EMPTY_CONSOLIDATED = {"kind": "inline", "must_understand": False, "metadata": {}}  # a nested group's entry


def _node_metadata(node: Path) -> dict:
    """A node's entry in the root's consolidated metadata: its ``zarr.json``, as zarr consolidates it."""
    meta = json.loads((node / "zarr.json").read_text())
    if meta.get("node_type") == "group":
        meta.setdefault("consolidated_metadata", _EMPTY_CONSOLIDATED)
    return meta


def _subtree(root: Path, group: str) -> dict[str, dict]:
    """Entries of ``group`` and every node below it (arrays' chunk folders are not walked)."""
    entries, todo = {}, [group]
    while todo:
        name = todo.pop()
        entries[name] = meta = _node_metadata(root / name)
        if meta.get("node_type") == "group":
            todo += [f"{name}/{child.name}" for child in (root / name).iterdir() if (child / "zarr.json").is_file()]
    return entries


def _recommit(root: Path, groups: set[str]) -> bool:
    """Refresh the root's consolidated entries of ``groups`` and their nodes; ``False`` (nothing
    written) where the root holds no consolidated metadata or a group is new to it."""
    doc = json.loads((root / "zarr.json").read_text())
    consolidated = doc.get("consolidated_metadata") or {}
    entries = consolidated.get("metadata")
    if consolidated.get("kind") != "inline" or entries is None or not groups <= entries.keys():
        return False
    for group in groups:
        for name in [k for k in entries if k == group or k.startswith(group + "/")]:
            del entries[name]
        entries.update(_subtree(root, group))
    tmp = root / f"zarr.json.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(doc))  # unindented: the C encoder (the indented one is Python, ~10 x slower)
    os.replace(tmp, root / "zarr.json")  # atomic: a reader sees the old commit or the new one
    return True


def committed(path: str):
    """The committed view (the consolidated metadata readers see)."""
    return zarr.open_group(path, mode="r")
