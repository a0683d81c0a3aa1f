"""What a run's store holds: the variables of each group, their dimensions, CF attributes and
coordinates, where a slice's planes lie, and the codecs of the stored bytes.

:mod:`daskflow.io.store` describes the layout these names fill and creates the groups from them.
"""

from __future__ import annotations

import numpy as np
import zarr

from daskflow.grid import Grid

SCALARS = ("step", "dt", "cfl", "div_max", "bulk_velocity", "tau_wall_bottom", "tau_wall_top", "re_tau",
           "kinetic_energy")
PROFILES_CENTRES = ("u", "v", "p", "uu", "vv", "pp", "uv")
PROFILES_FACES = ("w", "ww", "uw", "vw")
FIELD_DIMS = {"u": ("xf", "y", "z"), "v": ("x", "yf", "z"), "w": ("x", "y", "zf"), "p": ("x", "y", "z")}
_POSITIONS = {"x": "streamwise", "y": "spanwise", "z": "wall-normal"}
#: long_name of every stored variable (CF style; units are the configuration's, see :func:`attributes`)
LONG_NAMES = {
    **{a: f"{d} position of the cell centres" for a, d in _POSITIONS.items()},
    **{f"{a}f": f"{d} position of the upper cell faces" for a, d in _POSITIONS.items()},
    "time": "time", "step": "time step number",
    "u": "streamwise velocity", "v": "spanwise velocity", "w": "wall-normal velocity",
    "p": "kinematic pressure (pressure over density)",
    "uu": "plane mean of u squared", "vv": "plane mean of v squared", "ww": "plane mean of w squared",
    "pp": "plane mean of p squared", "uv": "plane mean of u v", "uw": "plane mean of u w", "vw": "plane mean of v w",
    "dt": "time step", "cfl": "Courant number (advective)", "div_max": "largest absolute divergence of the velocity",
    "bulk_velocity": "volume-averaged streamwise velocity",
    "tau_wall_bottom": "kinematic wall shear stress at the bottom wall",
    "tau_wall_top": "kinematic wall shear stress at the top wall",
    "re_tau": "friction Reynolds number (half height)", "kinetic_energy": "mean kinetic energy per unit volume",
}
#: units of every stored variable as powers of the configuration's length (L) and time (T) units
UNITS = {**dict.fromkeys(("x", "y", "z", "xf", "yf", "zf"), "L"), "time": "T", "dt": "T", "step": "1",
         **dict.fromkeys(("u", "v", "w", "bulk_velocity"), "L T-1"),
         **dict.fromkeys(("p", "uu", "vv", "ww", "pp", "uv", "uw", "vw", "kinetic_energy", "tau_wall_bottom",
                          "tau_wall_top"), "L2 T-2"),
         "pp": "L4 T-4", "div_max": "T-1", "cfl": "1", "re_tau": "1"}


def attributes(name: str, group: str = "") -> dict:
    """CF-style attributes of variable ``name``: ``long_name`` and ``units``. daskflow computes in the
    units of its configuration (the lengths and ``nu`` given), so ``units`` names the powers of
    length (L) and time (T) a variable carries, ``1`` for counts and dimensionless numbers."""
    long_name = LONG_NAMES[name]
    if group == "profiles" and name in ("u", "v", "w", "p"):
        long_name = f"plane mean of the {long_name}"
    return {"long_name": long_name, "units": UNITS[name]}


def write_unit(array) -> tuple[int, ...]:
    """The block of ``array`` that one participant writes whole: its shard when the array is
    sharded (stores of older versions), else its chunk."""
    return tuple(array.shards or array.chunks)


def coordinates(grid: Grid) -> dict[str, np.ndarray]:
    """The stored coordinates: cell centres ``x, y, z`` and upper cell faces ``xf, yf, zf``."""
    return {"x": grid.xc, "y": grid.yc, "z": grid.zc, "xf": grid.xf[1:], "yf": grid.yf[1:], "zf": grid.zf[1:]}


def compressors(compression: str, checksum: bool = False) -> list:
    """Bytes-to-bytes codecs: zstd when asked, then a CRC32C of the stored bytes (checkpoints)."""
    codecs = [zarr.codecs.ZstdCodec(level=3)] if compression == "zstd" else []
    return [*codecs, zarr.codecs.Crc32cCodec()] if checksum else codecs


def slice_planes(grid: Grid, axis: int, planes) -> np.ndarray:
    """Indices of the cell centres nearest the coordinates ``planes`` along ``axis`` (sorted, unique)."""
    centres = (grid.xc, grid.yc, grid.zc)[axis]
    return np.unique([int(np.argmin(np.abs(centres - value))) for value in planes])
