"""Time-averaged profiles on the solver's staggered z grid, and the derivatives the solver's
discretisation defines on it: the wall gradients and the face gradients (see :mod:`daskflow.analysis`
for the stored profiles, the covariances formed here and the wall stress)."""

from __future__ import annotations

import numpy as np
import xarray as xr

from daskflow.analysis.reading import Window, select_window


class Profiles:
    """Time-averaged profiles as NumPy arrays with the geometry of the z grid."""

    def __init__(self, profiles: xr.Dataset, lz: float, window: Window, u_wall: tuple[float, float]):
        if "u" not in profiles:
            raise ValueError("profiles must hold the mean velocity 'u' on (time, z)")
        if "time" in profiles.dims:
            selected = select_window(profiles, window)
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


def wall_gradients(zc: np.ndarray, u: np.ndarray, lz: float, u_wall: tuple[float, float], order: int):
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


def ddz_faces(zc: np.ndarray, u: np.ndarray, grad_bottom: float, grad_top: float) -> np.ndarray:
    """``dU/dz`` on all ``nz + 1`` faces (walls included): the solver's compact difference
    ``(U[k+1] - U[k]) / (zc[k+1] - zc[k])`` inside, the given wall gradients (``dU/dn``) at the walls."""
    return np.concatenate([[grad_bottom], np.diff(u) / np.diff(zc), [-grad_top]])
