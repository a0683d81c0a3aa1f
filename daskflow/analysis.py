"""Post-processing of a run's Zarr store: wall units, bulk quantities and plots.

A run writes one Zarr v3 store whose groups (``fields``, ``slices``, ``profiles``, ``scalars``) are
xarray datasets; ``checkpoint`` is raw restart data and is not read here. The root attributes hold
``config`` (the full run configuration), ``grid`` and ``daskflow_version``.

The ``profiles`` group holds plane (x-y) means versus ``time``: ``u, v, p, uu, vv, pp, uv`` at the
cell centres ``z`` and ``w, ww, uw, vw`` at the z faces ``zf`` (``grid.zf[1:]``: the upper face of
every cell, the last one being the top wall ``z = lz``). Second moments are raw means of products,
so covariances are formed here: ``uu - u u`` and, on the faces, ``uw - u_f w`` with ``u_f`` the mean
of the two neighbouring centre values (the wall value at the top wall), the interpolation the writer
uses for the product ``u_f w`` (in a channel ``<w> = 0``, so ``uw`` is already the covariance).

Wall shear stress and the stress balance follow the solver's discretisation (second-order finite
differences on the staggered grid, walls imposed through a mirror ghost cell): the viscous stress on
an interior face is ``nu (U[k+1] - U[k]) / (zc[k+1] - zc[k])`` and on a wall ``nu (U1 - U_wall) / d1``
(``d1`` the first centre's distance to the wall), the flux the scheme applies there. With these the
discrete mean momentum balance holds exactly (steady laminar flow: ``tau_w = G h`` to round-off,
measured on a daskflow run), whereas the textbook second-order one-sided fit through the first two
centres, exact for a continuous parabola, over-estimates the solver's wall stress by ``O(d1 / h)``
(2.6 % on 16 stretched cells); it is available as ``gradient_order=2``.

Units are those of the run (the solver is nondimensional): lengths as ``config.grid.lengths``,
velocities as the run's, ``nu`` kinematic viscosity, stresses kinematic (per unit density,
velocity squared). Walls are at ``z = 0`` and ``z = lz``; the channel half height is ``h = lz / 2``.

Averaging: a time window ``(t0, t1)`` selects the stored samples with ``t0 <= time <= t1`` (both
inclusive up to a round-off tolerance of ``1e-9 max(1, |t|)``; ``None`` = all, also for either end)
and averages them with equal weights; covariances are formed *after*
the time average (mean of raw moments minus the product of time-averaged means), so they are
proper plane-and-time Reynolds averages (a drift of the mean within the window counts as a
fluctuation).

Only the time-averaged profiles (a few times ``nz`` numbers) are ever loaded; :func:`open_run`
is fully lazy (Dask-backed).
"""

from __future__ import annotations

import copy
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

__all__ = [
    "KAPPA",
    "LOG_LAW_B",
    "bulk_quantities",
    "open_run",
    "plot_scalars",
    "plot_wall_units",
    "time_average",
    "wall_units",
]

KAPPA = 0.41
"""von Kármán constant of the log-law line in :func:`plot_wall_units`."""
LOG_LAW_B = 5.2
"""Additive constant of the log-law line ``U+ = ln(y+) / KAPPA + LOG_LAW_B``."""

XARRAY_GROUPS = ("fields", "slices", "profiles", "scalars")
SKIPPED_GROUPS = ("checkpoint",)
SCALARS_ORDER = ("dt", "cfl", "div_max", "bulk_velocity", "kinetic_energy", "re_tau", "tau_wall_bottom", "tau_wall_top")

Window = tuple[float, float] | None


# ------------------------------------------------------------------------------------------------
# Opening a run
# ------------------------------------------------------------------------------------------------


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


def _run_parameters(ds: xr.Dataset, nu: float | None, lz: float | None) -> tuple[float, float]:
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


# ------------------------------------------------------------------------------------------------
# Time averaging and the averaged profiles
# ------------------------------------------------------------------------------------------------


def _select(ds: xr.Dataset, window: Window) -> xr.Dataset:
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
    return _select(ds, window).mean("time", keep_attrs=True)


class _Profiles:
    """Time-averaged profiles as NumPy arrays with the geometry of the z grid."""

    def __init__(self, profiles: xr.Dataset, lz: float, window: Window, u_wall: tuple[float, float]):
        if "u" not in profiles:
            raise ValueError("profiles must hold the mean velocity 'u' on (time, z)")
        if "time" in profiles.dims:
            selected = _select(profiles, window)
            self.n_samples = int(selected.sizes["time"])
            mean = selected.mean("time", keep_attrs=True).compute()
        else:
            self.n_samples, mean = 1, profiles.compute()
        self.zc = np.asarray(mean["z"].values, dtype=np.float64)
        nz = self.zc.size
        if nz < 2:
            raise ValueError("the wall gradient needs at least two cells in z")
        if "zf" in mean.coords:
            zf = np.asarray(mean["zf"].values, dtype=np.float64)
            if zf.size != nz or abs(zf[-1] - lz) > 1e-9 * lz:
                raise ValueError(f"profiles zf must be the nz upper faces ending at lz={lz}, got {zf[-1]!r}")
        else:  # faces from the centres: every centre is the midpoint of its faces, z = 0 the first face
            zf = np.empty(nz)
            lower = 0.0
            for k in range(nz):
                zf[k] = 2.0 * self.zc[k] - lower
                lower = zf[k]
        self.zf_all = np.concatenate([[0.0], zf])  # all nz + 1 faces, walls included
        if not np.allclose(0.5 * (self.zf_all[1:] + self.zf_all[:-1]), self.zc, rtol=0.0, atol=1e-9 * lz):
            raise ValueError("profiles z (centres) must be the midpoints of the faces 0, zf[0], ..., zf[-1] = lz")
        self.lz = lz
        self.u_wall = (float(u_wall[0]), float(u_wall[1]))
        self.mean = mean

    def get(self, name: str) -> np.ndarray | None:
        return np.asarray(self.mean[name].values, dtype=np.float64) if name in self.mean else None

    @staticmethod
    def centres_to_faces(u: np.ndarray, top_value: float) -> np.ndarray:
        """Centre values onto the stored faces (``zf[1:]``): mean of the two neighbouring centres (the
        writer's interpolation for ``u_f w``), ``top_value`` at the top wall."""
        return np.concatenate([0.5 * (u[:-1] + u[1:]), [top_value]])

    @staticmethod
    def faces_to_centres(f: np.ndarray, bottom_value: float = 0.0) -> np.ndarray:
        """Stored-face values (``zf[1:]``) to centres: mean of the two faces (exact linear interpolation),
        ``bottom_value`` at the bottom wall face ``z = 0``."""
        below = np.concatenate([[bottom_value], f[:-1]])
        return 0.5 * (below + f)

    def covariance_centres(self, a: str, b: str) -> np.ndarray | None:
        """``<a'b'>`` at the centres for two centre variables (``aa``, or ``ab`` named ``a + b``)."""
        raw, ma, mb = self.get(a + b), self.get(a), self.get(b)
        if raw is None or ma is None or mb is None:
            return None
        return raw - ma * mb

    def covariance_faces_to_centres(self, centre_var: str | None, face_var: str) -> np.ndarray | None:
        """``<c'w'>`` (or ``<w'w'>`` when ``centre_var`` is None) formed on the faces, zero at the bottom
        wall (impermeable, no-slip), then interpolated to the centres."""
        w = self.get(face_var)
        if centre_var is None:
            raw = self.get(face_var + face_var)
            if raw is None or w is None:
                return None
            cov = raw - w * w
        else:
            raw, c = self.get(centre_var + face_var), self.get(centre_var)
            if raw is None or w is None or c is None:
                return None
            top = self.u_wall[1] if centre_var == "u" else 0.0
            cov = raw - self.centres_to_faces(c, top) * w
        return self.faces_to_centres(cov, 0.0)


def _wall_gradients(zc: np.ndarray, u: np.ndarray, lz: float, u_wall: tuple[float, float], order: int):
    """``dU/dn`` at both walls, ``n`` the distance from the wall into the flow.

    ``order=1``: ``(U1 - U_wall) / d1``, the wall flux of the solver's ghost-cell discretisation
    (exact for its discrete solution). ``order=2``: the quadratic through the wall value and the first
    two centres, ``dU/dn = (U1 d2^2 - U2 d1^2) / (d1 d2 (d2 - d1))`` with ``Ui`` relative to the wall
    velocity and ``di`` the centres' distances to the wall (exact for a continuous parabola).
    """
    out = []
    for d1, d2, u1, u2, uw in (
        (zc[0], zc[1], u[0], u[1], u_wall[0]),
        (lz - zc[-1], lz - zc[-2], u[-1], u[-2], u_wall[1]),
    ):
        u1, u2 = u1 - uw, u2 - uw
        if order == 1:
            out.append(u1 / d1)
        elif order == 2:
            out.append((u1 * d2 * d2 - u2 * d1 * d1) / (d1 * d2 * (d2 - d1)))
        else:
            raise ValueError(f"gradient order must be 1 or 2, got {order!r}")
    return out[0], out[1]


def _ddz_faces(zc: np.ndarray, u: np.ndarray, grad_bottom: float, grad_top: float) -> np.ndarray:
    """``dU/dz`` on all ``nz + 1`` faces (walls included): the solver's compact difference
    ``(U[k+1] - U[k]) / (zc[k+1] - zc[k])`` inside, the given wall gradients (``dU/dn``) at the walls."""
    return np.concatenate([[grad_bottom], np.diff(u) / np.diff(zc), [-grad_top]])


# ------------------------------------------------------------------------------------------------
# Wall units
# ------------------------------------------------------------------------------------------------


def wall_units(
    profiles: xr.Dataset,
    nu: float | None = None,
    lz: float | None = None,
    window: Window = None,
    *,
    fold: bool | None = None,
    gradient_order: int = 1,
    u_wall: tuple[float, float] = (0.0, 0.0),
) -> xr.Dataset:
    """Time-averaged channel statistics in wall units.

    ``profiles``: the run's ``profiles`` group; ``nu``: kinematic viscosity; ``lz``: channel height
    (walls at 0 and ``lz``, ``h = lz / 2``); both default to ``attrs["run"]["config"]``;
    ``window``: ``(t0, t1)`` (inclusive) or ``None`` for all samples; ``u_wall``: streamwise wall
    velocities (bottom, top), 0 for a channel; wall stresses are signed, positive when the flow
    relative to the wall goes in +x (so a Couette flow, whose mean stress is zero, is refused).

    Wall shear stress (kinematic, velocity squared) at each wall: ``nu dU/dn``, by default
    (``gradient_order=1``) ``nu (U1 - U_wall) / d1``, the solver's own wall flux (exact for its discrete
    solution; the run's ``scalars`` use the same); ``gradient_order=2``: the second-order one-sided fit
    through the first two centres (exact for a continuous parabola, ``O(d1 / h)`` high on the solver's
    output; see the module docstring). ``tau_wall`` is the mean of the two walls,
    ``u_tau = sqrt(tau_wall)`` (used for both walls), ``delta_nu = nu / u_tau``,
    ``re_tau = u_tau h / nu``.

    Returned variables:

    - 0-d: ``tau_wall_bottom``, ``tau_wall_top``, ``tau_wall``, ``u_tau_bottom``, ``u_tau_top``,
      ``u_tau``, ``re_tau``, ``delta_nu``, ``n_samples``.
    - on ``z`` (all centres, run units): ``U``, ``dUdz``, ``u_rms``, ``v_rms``, ``w_rms``, ``p_rms``,
      ``uw`` (the covariance ``<u'w'>``). Face quantities are formed on the faces and interpolated to
      the centres as the mean of the two faces (exact linear interpolation: centres are the faces'
      midpoints), zero at the bottom wall: ``w_rms`` (square root of the interpolated variance),
      ``uw``, and ``dUdz`` (from the face gradients above, wall faces included), so the centre stress
      balance is exactly the mean of the solver's face balances.
    - on ``k`` (index of the point counted from the wall, 0 nearest), in wall units: ``U_plus``
      (``(U - U_wall) / u_tau``), ``u_rms_plus``, ``v_rms_plus``, ``w_rms_plus``, ``p_rms_plus``
      (``p_rms / tau_wall``), ``reynolds_stress_plus`` (``-<u'w'>+``, sign taken into the wall-normal
      direction pointing away from the wall), ``dUdy_plus``, ``total_stress_plus``
      (``reynolds_stress_plus + dUdy_plus``, which equals ``1 - y/h`` in a statistically steady
      pressure-driven channel) and ``total_stress_linear`` (``1 - y/h``); coordinates ``y`` (distance
      to the wall), ``yplus`` (``y / delta_nu``) and ``y_over_h``.

    Folding (``fold``): ``True`` averages each point of the lower half with its mirror point of the
    upper half (the two walls on the same y+ points; needs a grid symmetric about ``h``; with odd
    ``nz`` the centre point is its own mirror), giving dims ``(k,)`` with ``ceil(nz / 2)`` points.
    ``False`` keeps both halves on dims ``(wall, k)`` with ``wall = ["bottom", "top"]``, each half
    holding the centres with ``y <= h`` from that wall (NaN-padded when the halves differ in size), and
    ``y``/``yplus`` 2-D. ``None`` (default): fold when the grid is symmetric, else keep both halves.
    Attribute ``folded`` says which.
    """
    nu, lz = _run_parameters(profiles, nu, lz)
    prof = _Profiles(profiles, lz, window, u_wall)
    zc, h = prof.zc, 0.5 * lz
    nz = zc.size
    U = prof.get("u")

    grad_b, grad_t = _wall_gradients(zc, U, lz, prof.u_wall, gradient_order)
    tau_b, tau_t = nu * grad_b, nu * grad_t
    tau = 0.5 * (tau_b + tau_t)
    if not tau > 0:
        raise ValueError(f"the mean wall shear stress is not positive ({tau!r}): no wall units")
    u_tau = float(np.sqrt(tau))
    delta_nu = nu / u_tau

    dudz = _Profiles.faces_to_centres(_ddz_faces(zc, U, grad_b, grad_t)[1:], grad_b)
    rms = {}
    for name, var in (("u", prof.covariance_centres("u", "u")), ("v", prof.covariance_centres("v", "v")),
                      ("w", prof.covariance_faces_to_centres(None, "w")), ("p", prof.covariance_centres("p", "p"))):
        if var is not None:
            rms[name] = np.sqrt(np.maximum(var, 0.0))
    uw = prof.covariance_faces_to_centres("u", "w")

    symmetric = bool(np.allclose(zc + zc[::-1], lz, rtol=0.0, atol=1e-10 * lz))
    if fold is None:
        fold = symmetric
    elif fold and not symmetric:
        raise ValueError("fold=True needs a z grid symmetric about the channel centre")

    # each wall's half of a centre profile, ordered from that wall outwards
    def halves(values: np.ndarray, odd: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``odd``: the quantity changes sign with the wall-normal direction (gradients, shear stress)."""
        bottom = values[zc <= h + 1e-12 * lz]
        top = values[zc >= h - 1e-12 * lz][::-1]
        return bottom, (-top if odd else top)

    ub, ut = prof.u_wall
    profiles_plus: dict[str, tuple[np.ndarray, np.ndarray]] = {
        "U_plus": ((halves(U)[0] - ub) / u_tau, (halves(U)[1] - ut) / u_tau),
        "dUdy_plus": tuple(x * delta_nu / u_tau for x in halves(dudz, odd=True)),
    }
    for name, values in rms.items():
        scale = tau if name == "p" else u_tau
        profiles_plus[f"{name}_rms_plus"] = tuple(x / scale for x in halves(values))
    if uw is not None:
        profiles_plus["reynolds_stress_plus"] = tuple(-x / tau for x in halves(uw, odd=True))
    y_b, y_t = halves(zc)[0], lz - halves(zc)[1]

    attrs = {
        "nu": nu,
        "lz": lz,
        "h": h,
        "window": "all" if window is None else str(tuple(window)),
        "folded": int(bool(fold)),
        "gradient_order": int(gradient_order),
        "u_wall": list(prof.u_wall),
        "description": "channel statistics in wall units (daskflow.analysis.wall_units)",
    }
    if fold:
        n = (nz + 1) // 2
        data = {name: (("k",), 0.5 * (b[:n] + t[:n])) for name, (b, t) in profiles_plus.items()}
        y = 0.5 * (y_b[:n] + y_t[:n])
        coords = {"y": (("k",), y), "yplus": (("k",), y / delta_nu), "y_over_h": (("k",), y / h)}
        dims: tuple[str, ...] = ("k",)
    else:
        n = max(y_b.size, y_t.size)

        def pad(x: np.ndarray) -> np.ndarray:
            return np.concatenate([x, np.full(n - x.size, np.nan)])

        data = {name: (("wall", "k"), np.stack([pad(b), pad(t)])) for name, (b, t) in profiles_plus.items()}
        y = np.stack([pad(y_b), pad(y_t)])
        dims = ("wall", "k")
        coords = {"wall": ("wall", ["bottom", "top"]), "y": (dims, y), "yplus": (dims, y / delta_nu),
                  "y_over_h": (dims, y / h)}
    coords["k"] = ("k", np.arange(n))
    if "dUdy_plus" in data and "reynolds_stress_plus" in data:
        data["total_stress_plus"] = (dims, data["dUdy_plus"][1] + data["reynolds_stress_plus"][1])
    data["total_stress_linear"] = (dims, 1.0 - coords["y_over_h"][1])

    centre = {"U": U, "dUdz": dudz, **{f"{k}_rms": v for k, v in rms.items()}}
    if uw is not None:
        centre["uw"] = uw
    data.update({name: (("z",), values) for name, values in centre.items()})
    coords["z"] = ("z", zc)
    scalars = {
        "tau_wall_bottom": tau_b,
        "tau_wall_top": tau_t,
        "tau_wall": tau,
        "u_tau_bottom": float(np.sqrt(tau_b)) if tau_b >= 0 else np.nan,
        "u_tau_top": float(np.sqrt(tau_t)) if tau_t >= 0 else np.nan,
        "u_tau": u_tau,
        "re_tau": u_tau * h / nu,
        "delta_nu": delta_nu,
        "n_samples": prof.n_samples,
    }
    data.update({name: ((), value) for name, value in scalars.items()})
    ds = xr.Dataset(data, coords=coords, attrs=attrs)
    units = {"U": "velocity", "dUdz": "1/time", "uw": "velocity^2", "tau_wall": "velocity^2 (kinematic)",
             "tau_wall_bottom": "velocity^2 (kinematic)", "tau_wall_top": "velocity^2 (kinematic)",
             "u_tau": "velocity", "delta_nu": "length", "y": "length", "z": "length"}
    for name, unit in units.items():
        ds[name].attrs["units"] = unit
    for name in ds.variables:
        if name.endswith("_plus") or name in ("yplus", "re_tau", "y_over_h", "total_stress_linear"):
            ds[name].attrs["units"] = "1"
    return ds


# ------------------------------------------------------------------------------------------------
# Bulk quantities
# ------------------------------------------------------------------------------------------------


def bulk_quantities(
    profiles: xr.Dataset,
    nu: float | None = None,
    lz: float | None = None,
    window: Window = None,
    *,
    gradient_order: int = 1,
    u_wall: tuple[float, float] = (0.0, 0.0),
) -> dict[str, float]:
    """Bulk and centreline quantities of the time-averaged channel flow (plain floats, run units).

    - ``U_b``: bulk velocity ``(1/lz) sum U_k dz_k`` (midpoint rule over the cells, the solver's own
      definition of the bulk velocity; second-order accurate).
    - ``Re_b = U_b 2h / nu`` (based on the channel *height* ``2h = lz``, as in Dean's correlation).
    - ``U_c``: centreline velocity, the quadratic through the three centres nearest ``z = h``
      evaluated at ``h`` (exact for a parabola); ``Re_c = U_c h / nu`` (half height).
    - ``tau_w``, ``u_tau``, ``Re_tau`` as in :func:`wall_units` (mean of both walls).
    - ``Cf = tau_w / (0.5 U_b^2)``; ``Cf_dean = 0.073 Re_b^(-1/4)`` (Dean 1978, turbulent);
      ``Cf_laminar = 12 / Re_b`` (plane Poiseuille flow).
    - ``U_c_over_U_b``; ``n_samples`` (samples in the window).
    """
    nu, lz = _run_parameters(profiles, nu, lz)
    prof = _Profiles(profiles, lz, window, u_wall)
    zc, h = prof.zc, 0.5 * lz
    U = prof.get("u")
    dz = np.diff(prof.zf_all)
    u_b = float(np.sum(U * dz) / lz)
    near = np.sort(np.argsort(np.abs(zc - h))[: min(3, zc.size)])
    zs, us = zc[near], U[near]
    u_c = float(sum(us[i] * np.prod([(h - zs[j]) / (zs[i] - zs[j]) for j in range(zs.size) if j != i])
                    for i in range(zs.size)))
    grad_b, grad_t = _wall_gradients(zc, U, lz, prof.u_wall, gradient_order)
    tau = float(0.5 * nu * (grad_b + grad_t))
    re_b = u_b * lz / nu
    return {
        "U_b": u_b,
        "Re_b": re_b,
        "U_c": u_c,
        "Re_c": u_c * h / nu,
        "U_c_over_U_b": u_c / u_b if u_b != 0 else float("nan"),
        "tau_w": tau,
        "u_tau": float(np.sqrt(tau)) if tau >= 0 else float("nan"),
        "Re_tau": float(np.sqrt(tau)) * h / nu if tau >= 0 else float("nan"),
        "Cf": tau / (0.5 * u_b * u_b) if u_b != 0 else float("nan"),
        "Cf_dean": 0.073 * re_b ** (-0.25) if re_b > 0 else float("nan"),
        "Cf_laminar": 12.0 / re_b if re_b > 0 else float("nan"),
        "n_samples": float(prof.n_samples),
    }


# ------------------------------------------------------------------------------------------------
# Plots (matplotlib imported lazily; no pyplot, so no global state and no display needed)
# ------------------------------------------------------------------------------------------------

#: short symbols (matplotlib mathtext) of the stored scalars, for axis labels; the long names and units
#: come from the store's ``long_name`` and ``units`` attributes
_SCALAR_SYMBOLS = {
    "dt": r"$\Delta t$", "cfl": "CFL", "div_max": r"$\max|\nabla\cdot\mathbf{u}|$", "bulk_velocity": r"$U_b$",
    "kinetic_energy": r"$E_k$", "re_tau": r"$Re_\tau$", "tau_wall_bottom": r"$\tau_w$ (bottom)",
    "tau_wall_top": r"$\tau_w$ (top)", "tau_wall": r"$\tau_w$", "time": r"$t$",
}

_FIGURE_CLASS = None


def _figure_class():
    """A matplotlib ``Figure`` that Jupyter shows inline as a PNG (``_repr_png_``), also when pyplot and
    its inline backend were never loaded (the figures here are not pyplot's)."""
    global _FIGURE_CLASS
    if _FIGURE_CLASS is None:
        try:
            from matplotlib.figure import Figure
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("plotting needs matplotlib (pip install matplotlib)") from exc

        class PlotFigure(Figure):
            def _repr_png_(self) -> bytes:
                import io

                buffer = io.BytesIO()
                self.savefig(buffer, format="png", dpi=80)
                return buffer.getvalue()

        _FIGURE_CLASS = PlotFigure
    return _FIGURE_CLASS


def _figure(nrows: int, ncols: int, size: tuple[float, float]):
    fig = _figure_class()(figsize=size, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _finish(fig, path: str | os.PathLike | None):
    """Save ``fig`` as a PNG at ``path`` and return the path, or return the figure when ``path`` is None
    (a matplotlib ``Figure``: the last expression of a notebook cell shows it inline)."""
    if path is None:
        return fig
    path = Path(path)
    fig.savefig(path, dpi=110)
    return path


def _per_wall(ds: xr.Dataset):
    """(wall name or "", dataset of one profile set) for a two-wall or a folded ``wall_units`` result."""
    if "wall" in ds.dims:
        return [(str(w), ds.sel(wall=w)) for w in ds["wall"].values]
    return [("", ds)]


def _decade_label(value: float, _pos=None) -> str:
    """Tick label of a power of ten: plain numbers from 0.001 to 10000 (``1``, ``10``, ``100``), ``10^k``
    outside; empty for anything else (a log axis labels its decades only)."""
    if not value > 0:
        return ""
    k = np.log10(value)
    if abs(k - round(k)) > 1e-6:
        return ""
    k = int(round(k))
    return f"{10.0 ** k:g}" if -3 <= k <= 4 else rf"$10^{{{k}}}$"


def _log_axis(ax, values: np.ndarray, axis: str = "x") -> None:
    """A log axis labelled at its decades only (``0.1, 1, 10, 100``), unlabelled minor ticks, and limits
    from the decade below the smallest value to the largest value (extended to the next decade when
    no labelled decade would be inside), so every plot has at least two labelled ticks."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values) & (values > 0)]
    scale = ax.set_xscale if axis == "x" else ax.set_yscale
    scale("log")
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(LogLocator(base=10.0, numticks=12))
    target.set_major_formatter(FuncFormatter(_decade_label))
    target.set_minor_locator(LogLocator(base=10.0, subs=np.arange(2, 10), numticks=12))
    target.set_minor_formatter(NullFormatter())
    if values.size:
        lo = 10.0 ** np.floor(np.log10(values.min()))
        hi = max(values.max() * 1.15, 10.0 * lo)
        (ax.set_xlim if axis == "x" else ax.set_ylim)(lo, hi)


def _units_label(units: str) -> str:
    """CF-style units of the store (``"L T-1"``, ``"L2 T-2"``, ``"1"``) as a mathtext bracket for an axis
    label (``" [L T^-1]"``); empty for dimensionless quantities; other strings as they are."""
    import re

    units = str(units).strip()
    if units in ("", "1"):
        return ""
    parts = []
    for token in units.split():
        m = re.fullmatch(r"([A-Za-z]+)(-?\d+)?", token)
        if m is None:
            return f" [{units}]"
        parts.append(m.group(1) if m.group(2) in (None, "1") else f"{m.group(1)}^{{{m.group(2)}}}")
    return r" [$\mathrm{" + r"\,".join(parts) + "}$]"


def _axis_label(var: xr.DataArray | None, name: str) -> str:
    """``symbol [units]`` from the variable's ``units`` attribute (the symbol from :data:`_SCALAR_SYMBOLS`,
    else ``long_name``, else the variable name)."""
    attrs = {} if var is None else var.attrs
    symbol = _SCALAR_SYMBOLS.get(name) or attrs.get("long_name") or name
    return symbol + _units_label(attrs.get("units", ""))


def _panel_title(var: xr.DataArray | None, name: str) -> str:
    """The variable's ``long_name`` with a capital first letter (the variable name when it has none)."""
    long_name = None if var is None else var.attrs.get("long_name")
    if not long_name:
        return name
    return long_name[0].upper() + long_name[1:]


def _run_summary(ds: xr.Dataset) -> str:
    """``grid nx × ny × nz, nu = ...`` from a dataset's ``attrs["run"]["config"]`` (empty when absent)."""
    try:
        config = ds.attrs["run"]["config"]
        shape = " × ".join(str(int(n)) for n in config["grid"]["shape"])
        return rf"grid {shape}, $\nu$ = {float(config['physics']['nu']):g}"
    except (KeyError, TypeError, ValueError):
        return ""


def plot_wall_units(ds: xr.Dataset, path: str | os.PathLike | None = None):
    """Plot a :func:`wall_units` result in three panels: the mean velocity ``U+`` versus ``y+`` on a log
    axis with the viscous sublayer ``U+ = y+`` and the log law ``U+ = ln(y+) / 0.41 + 5.2``; the rms
    velocities and the Reynolds shear stress versus ``y+`` (log axis); the mean stress balance versus
    ``y/h`` with the steady-state line ``1 - y/h``. A two-wall (unfolded) result draws both walls.

    With ``path``, saves a PNG there and returns the path; without, returns the matplotlib ``Figure``
    (shown inline as the last expression of a notebook cell)."""
    fig, axes = _figure(1, 3, (15.0, 4.6))
    ax_u, ax_rms, ax_stress = axes[0]
    yp_all = np.asarray(ds["yplus"].values, dtype=float)
    yp_all = yp_all[np.isfinite(yp_all) & (yp_all > 0)]
    walls = _per_wall(ds)
    rms_lines = (("u_rms_plus", r"$u'^+$ (streamwise)"), ("v_rms_plus", r"$v'^+$ (spanwise)"),
                 ("w_rms_plus", r"$w'^+$ (wall-normal)"), ("reynolds_stress_plus", r"$-\langle u'w'\rangle^+$"))
    stress_lines = (("dUdy_plus", r"viscous $dU^+/dy^+$"),
                    ("reynolds_stress_plus", r"Reynolds $-\langle u'w'\rangle^+$"), ("total_stress_plus", "total"))
    # one colour per quantity; with two walls, the top wall dashed and the quantities named once
    for index, (wall, one) in enumerate(walls):
        style = "-" if index == 0 else "--"
        yp = np.asarray(one["yplus"].values, dtype=float)
        ok = np.isfinite(yp) & (yp > 0)
        yp = yp[ok]
        ax_u.plot(yp, np.asarray(one["U_plus"].values)[ok], "o" + style, ms=3, color="C0",
                  label="daskflow" + (f" ({wall} wall)" if wall else ""))
        yh = np.asarray(one["y_over_h"].values, dtype=float)[ok]
        for ax, x, lines in ((ax_rms, yp, rms_lines), (ax_stress, yh, stress_lines)):
            for colour, (name, label) in enumerate(lines):
                if name in one:
                    ax.plot(x, np.asarray(one[name].values)[ok], style, color=f"C{colour}",
                            label=label if index == 0 else None)
    if len(walls) > 1:
        for ax in (ax_rms, ax_stress):
            for index, (wall, _) in enumerate(walls):
                ax.plot([], [], "-" if index == 0 else "--", color="0.45", label=f"{wall} wall")
    _log_axis(ax_u, yp_all)
    _log_axis(ax_rms, yp_all)
    if yp_all.size:
        lo, hi = ax_u.get_xlim()
        sub = np.geomspace(lo, min(hi, 15.0), 100)
        ax_u.plot(sub, sub, "k--", lw=1, label=r"viscous sublayer $U^+ = y^+$")
        if hi > 5.0:
            log = np.geomspace(max(lo, 5.0), hi, 100)
            ax_u.plot(log, np.log(log) / KAPPA + LOG_LAW_B, "k:", lw=1.2,
                      label=rf"log law $U^+ = \ln(y^+)/{KAPPA:g} + {LOG_LAW_B:g}$")
        umax = float(np.nanmax(ds["U_plus"].values))
        ax_u.set_ylim(0.0, 1.2 * umax if umax > 0 else 1.0)
    ax_stress.plot([0.0, 1.0], [1.0, 0.0], "k--", lw=1, label=r"$1 - y/h$ (steady state)")
    ax_stress.set_xlim(0.0, 1.0)
    ax_u.set(xlabel=r"$y^+ = y\,u_\tau/\nu$", ylabel=r"$U^+ = U/u_\tau$", title="Mean velocity")
    ax_rms.set(xlabel=r"$y^+ = y\,u_\tau/\nu$", ylabel=r"rms velocity / $u_\tau$, stress / $u_\tau^2$",
               title="Velocity fluctuations")
    ax_stress.set(xlabel=r"$y/h$", ylabel=r"shear stress / $\tau_w$", title="Mean shear stress balance")
    for ax in (ax_u, ax_rms, ax_stress):
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", alpha=0.12)
        ax.legend(fontsize="small")
    samples = int(ds["n_samples"]) if "n_samples" in ds else None
    details = [rf"$Re_\tau$ = {float(ds['re_tau']):.1f}", rf"$u_\tau$ = {float(ds['u_tau']):.4g}"]
    if samples is not None:
        details.append(f"{samples} sample{'s' if samples != 1 else ''}")
    summary = _run_summary(ds) or (rf"$\nu$ = {float(ds.attrs['nu']):g}" if "nu" in ds.attrs else "")
    fig.suptitle("Channel statistics in wall units: " + ", ".join(details) + (f" ({summary})" if summary else ""))
    return _finish(fig, path)


def plot_scalars(scalars: xr.Dataset, path: str | os.PathLike | None = None, variables: list[str] | None = None):
    """Plot the run's scalar time series (every 1-D numeric variable on ``time`` except ``step``, or
    ``variables``) versus ``time``, one panel each (the two wall shear stresses share one), titled with the
    variable's ``long_name`` and labelled with its ``units`` attribute (powers of the configuration's
    length L and time T); positive series spanning more than two decades (``div_max``) on a log axis.

    With ``path``, saves a PNG there and returns the path; without, returns the matplotlib ``Figure``."""
    if variables is None:
        found = [name for name, var in scalars.data_vars.items()
                 if var.dims == ("time",) and name != "step" and np.issubdtype(var.dtype, np.number)]
        variables = [name for name in SCALARS_ORDER if name in found] + sorted(set(found) - set(SCALARS_ORDER))
        walls = ("tau_wall_bottom", "tau_wall_top")
        both = all(name in variables for name in walls)
        panels = [walls if both and name == walls[0] else (name,) for name in variables
                  if not (both and name == walls[1])]
    else:
        panels = [(name,) for name in variables]
    if not panels:
        raise ValueError("no scalar time series to plot")
    ncols = 2 if len(panels) > 1 else 1
    nrows = -(-len(panels) // ncols)
    fig, axes = _figure(nrows, ncols, (6.4 * ncols, 2.9 * nrows + 0.5))
    t = np.asarray(scalars["time"].values)
    units_used = False
    for ax, group in zip(axes.ravel(), panels, strict=False):
        values = []
        for name in group:
            y = np.asarray(scalars[name].values, dtype=float)
            label = {"tau_wall_bottom": "bottom wall", "tau_wall_top": "top wall"}.get(name, name)
            ax.plot(t, y, lw=1, label=label)
            values.append(y)
        finite = np.concatenate(values)
        finite = finite[np.isfinite(finite)]
        if finite.size and finite.min() > 0 and finite.max() > 100 * finite.min():
            _log_axis(ax, finite, axis="y")
        first = scalars[group[0]]
        name = "tau_wall" if len(group) > 1 and group[0].startswith("tau_wall") else group[0]
        title = "Kinematic wall shear stress" if name == "tau_wall" else _panel_title(first, group[0])
        ax.set(xlabel=_axis_label(scalars["time"], "time"), ylabel=_axis_label(first, name), title=title)
        units_used = units_used or bool(_units_label(first.attrs.get("units", "")))
        if len(group) > 1:
            ax.legend(fontsize="small")
        ax.grid(True, alpha=0.3)
    for ax in axes.ravel()[len(panels):]:
        ax.set_visible(False)
    summary = _run_summary(scalars)
    fig.suptitle("Run time series" + (f" ({summary})" if summary else ""))
    if units_used:
        fig.supxlabel("units: L and T are the length and time units of the configuration", fontsize="small")
    return _finish(fig, path)
