"""Files daskflow ships beside its code, found the same way in a checkout and in an installed wheel.

* ``examples``: the example configurations (the repository's ``examples/*.yaml``), which the
  validation cases run;
* ``validation``: the committed reduced validation data (``docs/validation/data``: CSV, JSON, NPZ),
  which ``python -m daskflow.validation figures`` draws and ``reproduce`` compares a run with;
* ``results``: the benchmark results (``docs/results/*.json``) that
  :func:`daskflow.perfmodel.calibrate` fits the cost model to.

The repository keeps one copy of each, in the folder its documentation names. ``setup.py`` maps
those folders into this package (``daskflow/data/examples``, ``daskflow/data/validation``,
``daskflow/data/results``) when a wheel or an sdist is built; :data:`FOLDERS` is that mapping.
:func:`folder` gives the repository's folder when daskflow is imported from a source checkout (the
repository on ``sys.path``, or an editable install: edits show at once), else the copy installed
with the package.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

#: shipped name -> the repository folder it is built from (the mapping of setup.py)
FOLDERS = {"examples": "examples", "validation": "docs/validation/data", "results": "docs/results"}


def source_tree() -> Path | None:
    """The root of the daskflow checkout this package is imported from, or None (an installed package)."""
    root = Path(__file__).resolve().parents[2]
    try:
        project = (root / "pyproject.toml").read_text()
    except OSError:
        return None
    return root if 'name = "daskflow"' in project else None


def folder(name: str) -> Path:
    """Where the shipped files ``name`` (a key of :data:`FOLDERS`) are: the checkout's folder, or
    the installed package's (whether or not it exists; :func:`path` checks)."""
    if name not in FOLDERS:
        raise ValueError(f"unknown data folder {name!r}: one of {', '.join(FOLDERS)}")
    root = source_tree()
    if root is not None:
        return root / FOLDERS[name]
    installed = resources.files(__name__) / name
    if not isinstance(installed, Path):  # a zip import: daskflow runs from a file system only
        raise FileNotFoundError(f"daskflow's {name} are not on a file system ({installed})")
    return installed


def path(name: str, *parts: str) -> Path:
    """The shipped file or folder ``parts`` of ``name`` (``path("examples", "cavity100.yaml")``);
    FileNotFoundError, naming where it was looked for, when it is not there."""
    target = folder(name).joinpath(*parts)
    if not target.exists():
        where = "this checkout" if source_tree() else "the installed package (a wheel built without its data?)"
        raise FileNotFoundError(f"{target}: not found (daskflow's {name} come from {where})")
    return target
