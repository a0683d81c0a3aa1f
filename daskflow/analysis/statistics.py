"""Channel statistics from the time-averaged profiles: :func:`wall_units` (wall shear stress, wall
units, the profiles in wall units and the stress balance) and :func:`bulk_quantities` (bulk and
centreline numbers). The discretisation they follow and the averaging are described in
:mod:`daskflow.analysis`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xarray as xr

from daskflow.analysis.profiles import Profiles, ddz_faces, wall_gradients
from daskflow.analysis.reading import Window, run_parameters

# ------------------------------------------------------------------------------------------------
# Wall units
# ------------------------------------------------------------------------------------------------


def wall_units(profiles: xr.Dataset, nu: float | None = None, lz: float | None = None, window: Window = None, *,
               fold: bool | None = None, gradient_order: int = 1,
               u_wall: tuple[float, float] = (0.0, 0.0)) -> xr.Dataset:
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
    output; see :mod:`daskflow.analysis`). ``tau_wall`` is the mean of the two walls,
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
    nu, lz = run_parameters(profiles, nu, lz)
    prof = Profiles(profiles, lz, window, u_wall)
    wall = _wall_scales(prof, nu, gradient_order)
    centre = _centre_profiles(prof, wall)
    fold = _resolve_fold(fold, prof.zc, lz)
    data, coords = _wall_unit_profiles(prof, wall, centre, fold)
    data.update({name: (("z",), values) for name, values in centre.items()})
    coords["z"] = ("z", prof.zc)
    data.update({name: ((), value) for name, value in _wall_scalars(wall, nu, lz, prof.n_samples).items()})
    attrs = _attributes(nu, lz, window, fold, gradient_order, prof.u_wall)
    return _with_units(xr.Dataset(data, coords=coords, attrs=attrs))


@dataclass(frozen=True)
class _WallScales:
    """The wall shear stresses (kinematic) of both walls and the wall units their mean defines."""

    grad_bottom: float  # dU/dn at the bottom wall, n pointing into the flow
    grad_top: float  # dU/dn at the top wall
    tau_bottom: float
    tau_top: float
    tau: float  # the mean of the two walls
    u_tau: float  # sqrt(tau), used for both walls
    delta_nu: float  # nu / u_tau


def _wall_scales(prof: Profiles, nu: float, order: int) -> _WallScales:
    """The wall stresses ``nu dU/dn`` (gradients of :func:`wall_gradients` of the given ``order``), their
    mean and the wall units it defines; ``ValueError`` unless the mean stress is positive."""
    grad_b, grad_t = wall_gradients(prof.zc, prof.get("u"), prof.lz, prof.u_wall, order)
    tau_b, tau_t = nu * grad_b, nu * grad_t
    tau = 0.5 * (tau_b + tau_t)
    if not tau > 0:
        raise ValueError(f"the mean wall shear stress is not positive ({tau!r}): no wall units")
    u_tau = float(np.sqrt(tau))
    return _WallScales(grad_b, grad_t, tau_b, tau_t, tau, u_tau, nu / u_tau)


def _centre_profiles(prof: Profiles, wall: _WallScales) -> dict[str, np.ndarray]:
    """The statistics on the cell centres in run units: ``U``, ``dUdz`` (the face gradients of
    :func:`ddz_faces`, wall faces included, interpolated to the centres), ``u_rms``, ``v_rms``,
    ``w_rms``, ``p_rms`` and the covariance ``uw``, each when the profiles hold its moments."""
    U = prof.get("u")
    faces = ddz_faces(prof.zc, U, wall.grad_bottom, wall.grad_top)
    centre = {"U": U, "dUdz": Profiles.faces_to_centres(faces[1:], wall.grad_bottom)}
    for name, var in (("u", prof.covariance_centres("u", "u")), ("v", prof.covariance_centres("v", "v")),
                      ("w", prof.covariance_faces_to_centres(None, "w")), ("p", prof.covariance_centres("p", "p"))):
        if var is not None:
            centre[f"{name}_rms"] = np.sqrt(np.maximum(var, 0.0))
    uw = prof.covariance_faces_to_centres("u", "w")
    if uw is not None:
        centre["uw"] = uw
    return centre


def _resolve_fold(fold: bool | None, zc: np.ndarray, lz: float) -> bool:
    """``fold`` as asked, or for ``None`` whether the z grid is symmetric about the channel centre;
    ``ValueError`` for ``fold=True`` on a grid that is not."""
    symmetric = bool(np.allclose(zc + zc[::-1], lz, rtol=0.0, atol=1e-10 * lz))
    if fold is None:
        return symmetric
    if fold and not symmetric:
        raise ValueError("fold=True needs a z grid symmetric about the channel centre")
    return fold


def _halves(values: np.ndarray, zc: np.ndarray, lz: float, odd: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Each wall's half of a centre profile (the centres with ``y <= h`` from that wall), ordered from
    that wall outwards. ``odd``: the quantity changes sign with the wall-normal direction (gradients,
    shear stress)."""
    h = 0.5 * lz
    bottom = values[zc <= h + 1e-12 * lz]
    top = values[zc >= h - 1e-12 * lz][::-1]
    return bottom, (-top if odd else top)


def _plus_halves(prof: Profiles, wall: _WallScales, centre: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The profiles in wall units as their two halves (:func:`_halves`): ``U_plus`` relative to each
    wall's velocity, ``dUdy_plus``, the rms values (the pressure over ``tau``, velocities over
    ``u_tau``) and ``reynolds_stress_plus``."""
    zc, lz, (ub, ut) = prof.zc, prof.lz, prof.u_wall
    bottom, top = _halves(centre["U"], zc, lz)
    plus = {"U_plus": ((bottom - ub) / wall.u_tau, (top - ut) / wall.u_tau),
            "dUdy_plus": tuple(x * wall.delta_nu / wall.u_tau for x in _halves(centre["dUdz"], zc, lz, odd=True))}
    for name in ("u", "v", "w", "p"):
        if f"{name}_rms" in centre:
            scale = wall.tau if name == "p" else wall.u_tau
            plus[f"{name}_rms_plus"] = tuple(x / scale for x in _halves(centre[f"{name}_rms"], zc, lz))
    if "uw" in centre:
        plus["reynolds_stress_plus"] = tuple(-x / wall.tau for x in _halves(centre["uw"], zc, lz, odd=True))
    return plus


def _wall_unit_profiles(prof: Profiles, wall: _WallScales, centre: dict, fold: bool) -> tuple[dict, dict]:
    """The variables on ``k`` (:func:`_plus_halves`, folded or on both walls) with ``total_stress_plus``
    and ``total_stress_linear``, and their coordinates ``y``, ``yplus``, ``y_over_h`` and ``k``."""
    plus = _plus_halves(prof, wall, centre)
    zc, lz = prof.zc, prof.lz
    bottom, top = _halves(zc, zc, lz)
    y_b, y_t = bottom, lz - top
    if fold:
        data, y, dims = _folded(plus, y_b, y_t, zc.size)
        coords = {}
    else:
        data, y, dims = _both_walls(plus, y_b, y_t)
        coords = {"wall": ("wall", ["bottom", "top"])}
    coords.update({"y": (dims, y), "yplus": (dims, y / wall.delta_nu), "y_over_h": (dims, y / (0.5 * lz))})
    coords["k"] = ("k", np.arange(y.shape[-1]))
    if "dUdy_plus" in data and "reynolds_stress_plus" in data:
        data["total_stress_plus"] = (dims, data["dUdy_plus"][1] + data["reynolds_stress_plus"][1])
    data["total_stress_linear"] = (dims, 1.0 - coords["y_over_h"][1])
    return data, coords


def _folded(plus: dict, y_b: np.ndarray, y_t: np.ndarray, nz: int) -> tuple[dict, np.ndarray, tuple[str, ...]]:
    """Both walls on the same points: each point of the lower half averaged with its mirror point of
    the upper half (``ceil(nz / 2)`` points). Returns the variables, ``y`` and the dims."""
    n = (nz + 1) // 2
    data = {name: (("k",), 0.5 * (b[:n] + t[:n])) for name, (b, t) in plus.items()}
    return data, 0.5 * (y_b[:n] + y_t[:n]), ("k",)


def _both_walls(plus: dict, y_b: np.ndarray, y_t: np.ndarray) -> tuple[dict, np.ndarray, tuple[str, ...]]:
    """Both halves on dims ``(wall, k)``, the shorter one NaN-padded. Returns the variables, ``y`` and
    the dims."""
    n = max(y_b.size, y_t.size)

    def pad(x: np.ndarray) -> np.ndarray:
        return np.concatenate([x, np.full(n - x.size, np.nan)])

    data = {name: (("wall", "k"), np.stack([pad(b), pad(t)])) for name, (b, t) in plus.items()}
    return data, np.stack([pad(y_b), pad(y_t)]), ("wall", "k")


def _wall_scalars(wall: _WallScales, nu: float, lz: float, n_samples: int) -> dict:
    """The 0-d variables: the wall stresses and friction velocities, ``re_tau``, ``delta_nu`` and
    ``n_samples``."""
    return {
        "tau_wall_bottom": wall.tau_bottom,
        "tau_wall_top": wall.tau_top,
        "tau_wall": wall.tau,
        "u_tau_bottom": float(np.sqrt(wall.tau_bottom)) if wall.tau_bottom >= 0 else np.nan,
        "u_tau_top": float(np.sqrt(wall.tau_top)) if wall.tau_top >= 0 else np.nan,
        "u_tau": wall.u_tau,
        "re_tau": wall.u_tau * (0.5 * lz) / nu,
        "delta_nu": wall.delta_nu,
        "n_samples": n_samples,
    }


def _attributes(nu: float, lz: float, window: Window, fold: bool, gradient_order: int, u_wall) -> dict:
    """The attributes of a :func:`wall_units` result: its parameters and how it was formed."""
    return {
        "nu": nu,
        "lz": lz,
        "h": 0.5 * lz,
        "window": "all" if window is None else str(tuple(window)),
        "folded": int(bool(fold)),
        "gradient_order": int(gradient_order),
        "u_wall": list(u_wall),
        "description": "channel statistics in wall units (daskflow.analysis.wall_units)",
    }


def _with_units(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with the ``units`` attribute of its dimensional variables (named physical quantities: a
    :func:`wall_units` result is in the run's units) and ``"1"`` on those in wall units."""
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
    nu, lz = run_parameters(profiles, nu, lz)
    prof = Profiles(profiles, lz, window, u_wall)
    zc, h = prof.zc, 0.5 * lz
    U = prof.get("u")
    dz = np.diff(prof.zf_all)
    u_b = float(np.sum(U * dz) / lz)
    near = np.sort(np.argsort(np.abs(zc - h))[: min(3, zc.size)])
    zs, us = zc[near], U[near]
    u_c = float(sum(us[i] * np.prod([(h - zs[j]) / (zs[i] - zs[j]) for j in range(zs.size) if j != i])
                    for i in range(zs.size)))
    grad_b, grad_t = wall_gradients(zc, U, lz, prof.u_wall, gradient_order)
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
