"""Opening a run's store and selecting its samples: the lazy xarray groups of :func:`open_run`, the
run parameters they carry, and the time windows the statistics average over (see
:mod:`daskflow.analysis` for the store's groups and the averaging)."""

from __future__ import annotations

import copy
import os
import warnings
from typing import Any

import xarray as xr

XARRAY_GROUPS = ("fields", "slices", "profiles", "scalars")
SKIPPED_GROUPS = ("checkpoint",)

Window = tuple[float, float] | None


def open_run(store: str | os.PathLike | Any) -> dict[str, xr.Dataset]:
    """Open every xarray group of a run's Zarr store lazily (Dask-backed, nothing is loaded).

    ``store`` is a path or any Zarr store object. Returns ``{group name: Dataset}`` for the groups
    present (``fields``, ``slices``, ``profiles``, ``scalars`` and any other xarray group; a group
    that holds only sub-groups is opened per sub-group as ``"group/sub"``); ``checkpoint`` is
    skipped, missing groups are simply absent. The store's root attributes (``config``, ``grid``,
    ``daskflow_version``) are copied into every dataset's ``attrs["run"]``. A daskflow store is read
    in its committed view: a store being written, or killed, opens with the records complete in all
    their arrays.
    """
    import zarr

    root = zarr.open_group(_zarr_store(store), mode="r")
    # the committed view of a daskflow store (records complete in all their arrays); stores without
    # consolidated metadata are read as they are
    consolidated = root.metadata.consolidated_metadata is not None
    run_attrs = dict(root.attrs.asdict())
    out: dict[str, xr.Dataset] = {}

    def visit(group, path: str) -> None:
        has_arrays = any(True for _ in group.array_keys())
        subgroups = sorted(group.group_keys())
        if has_arrays or not subgroups:
            try:
                ds = xr.open_zarr(_zarr_store(store), group=path, consolidated=consolidated, chunks={})
            except Exception as exc:  # an unknown group need not be an xarray dataset
                if path.split("/")[0] in XARRAY_GROUPS:
                    raise
                warnings.warn(f"open_run: group {path!r} is not an xarray dataset, skipped ({exc})", stacklevel=3)
                return
            ds.attrs["run"] = copy.deepcopy(run_attrs)
            out[path] = ds
        else:
            for name in subgroups:
                visit(group[name], f"{path}/{name}")

    for name in sorted(root.group_keys()):
        if name in SKIPPED_GROUPS:
            continue
        visit(root[name], name)
    return out


def _zarr_store(store):
    """Paths as strings (zarr and xarray both accept them); store objects unchanged."""
    return os.fspath(store) if isinstance(store, (str, os.PathLike)) else store


def run_parameters(ds: xr.Dataset, nu: float | None, lz: float | None) -> tuple[float, float]:
    """``nu`` and ``lz`` as given, else from ``ds.attrs["run"]["config"]`` (as set by :func:`open_run`)."""
    if nu is None or lz is None:
        try:
            config = ds.attrs["run"]["config"]
            nu = float(config["physics"]["nu"]) if nu is None else nu
            lz = float(config["grid"]["lengths"][2]) if lz is None else lz
        except (KeyError, TypeError, IndexError) as exc:
            raise ValueError(
                "nu and lz must be given, or the dataset must carry attrs['run']['config'] (see open_run)"
            ) from exc
    nu, lz = float(nu), float(lz)
    if not (nu > 0 and lz > 0):
        raise ValueError(f"nu and lz must be positive, got nu={nu!r}, lz={lz!r}")
    return nu, lz


def select_window(ds: xr.Dataset, window: Window) -> xr.Dataset:
    """The samples with ``t0 <= time <= t1`` (lazy); ``ValueError`` when there are none."""
    if window is not None:
        t0, t1 = window
        if t0 is not None and t1 is not None and t1 < t0:
            raise ValueError(f"window must be (t0, t1) with t0 <= t1, got {window!r}")
        lo = None if t0 is None else t0 - 1e-9 * max(1.0, abs(t0))
        hi = None if t1 is None else t1 + 1e-9 * max(1.0, abs(t1))
        ds = ds.sel(time=slice(lo, hi))
    if ds.sizes["time"] == 0:
        raise ValueError(f"the time window {window!r} holds no stored sample")
    return ds


def time_average(ds: xr.Dataset, window: Window = None) -> xr.Dataset:
    """Equal-weight mean over the samples with ``t0 <= time <= t1`` (lazy; ``None`` = all samples;
    a dataset without ``time`` is returned as is). Raises ``ValueError`` when the window holds no sample.
    """
    if "time" not in ds.dims:
        return ds
    return select_window(ds, window).mean("time", keep_attrs=True)
