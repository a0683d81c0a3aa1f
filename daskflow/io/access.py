"""Where a run's store lives and the two views of it: the live arrays its writers open, and the
committed view readers get, which :func:`commit` moves forward (see :mod:`daskflow.io.store`)."""

from __future__ import annotations

import warnings
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


def commit(path: str) -> None:
    """Make everything written so far visible to readers: consolidate the metadata at the root (one
    atomic write of the root ``zarr.json``). Only one writer commits: the run's first participant,
    or the client outside a run."""
    with warnings.catch_warnings():  # zarr notes that consolidation is not in the v3 spec yet, and that
        warnings.simplefilter("ignore")  # checkpoint/CURRENT is not a zarr node
        zarr.consolidate_metadata(path)


def committed(path: str):
    """The committed view (the consolidated metadata readers see)."""
    return zarr.open_group(path, mode="r")
