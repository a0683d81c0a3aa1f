"""Fast transforms that diagonalise the 1-D second-difference operator on a uniform axis.

On CuPy arrays every real-to-real (r2r) transform is built from complex FFTs (``cupy.fft`` and
elementwise ops only). On NumPy arrays the transforms run in ``scipy.fft`` (pocketfft) on
:func:`~daskflow.backend.cpu_threads` threads (its ``workers``; ``DASKFLOW_THREADS``, the same
setting as the compiled loops' slab pool): the real FFT and, for the DCT/DST types scipy has (I, II,
III, IV), its r2r transforms directly (on one thread, 64 x 64 x 128 float64 along either axis: 2-7x
faster than the FFT-built ones, which also move the axis and make complex temporaries); the two
face-placed types scipy lacks (ND and DN with placement ``"f"``) use the FFT-built formula with
scipy's FFT along the axis in place. Both paths give the same results to round-off
(tests/test_transforms.py checks every pair and placement).

Conventions. An axis holds ``n`` stored points with spacing ``h``; ``bc`` is a pair of letters from
P (periodic), N (homogeneous Neumann), D (homogeneous Dirichlet), first letter at the lower end.

* placement ``"c"``: unknowns at cell centres ``i = 0..n-1``; ghosts: P wraps, N ``x[-1] = x[0]``
  (``x[n] = x[n-1]``), D ``x[-1] = -x[0]`` (``x[n] = -x[n-1]``). ``m = n`` unknowns.
* placement ``"f"``: stored point ``i`` sits on face ``i + 1``; face 0 (the lower boundary) is not
  stored. PP: ``m = n``, same matrix as ``"c"``. Otherwise the last stored point is the upper
  boundary and not an unknown, ``m = n - 1``; ghosts (CaNS): lower D face 0 = 0, lower N
  ``x[-1] = x[0]``, upper D ``x[m] = 0``, upper N ``x[m] = x[m-1]``.

Operator ``(x[i-1] - 2 x[i] + x[i+1]) / h**2``. For r2r pairs its eigenvectors are
``v_l(i) = f(pi (i + a)(l + b) / L)``, ``i, l = 0..m-1``, eigenvalues
``lambda_l = -2 (1 - cos(pi (l + b) / L)) / h**2``, norms ``sum_i v_l(i)**2 = L/2`` (``L`` when
``l + b`` is 0 or ``L``)::

    placement bc   f    a    b    L        classical name
    c         NN   cos  1/2  0    m        DCT-II
    c         DD   sin  1/2  1    m        DST-II
    c         ND   cos  1/2  1/2  m        DCT-IV
    c         DN   sin  1/2  1/2  m        DST-IV
    f         NN   cos  1/2  0    m        DCT-II (m = n - 1)
    f         DD   sin  1    1    m + 1    DST-I
    f         ND   cos  1/2  1/2  m + 1/2  DCT-VIII type
    f         DN   sin  1    1/2  m + 1/2  its mirror

``forward`` is unnormalised, ``X_l = sum_i v_l(i) x_i``; ``backward`` is its exact inverse,
``x_i = sum_l v_l(i) X_l / norm_l``. PP uses ``rfft`` (real input, ``n//2 + 1`` modes) or ``fft``
(complex input, ``n`` modes in FFT order) with ``lambda_l = -2 (1 - cos(2 pi l / n)) / h**2`` and
NumPy's 'backward' normalisation. Complex input to an r2r transform has its real and imaginary
parts transformed independently. Precision is kept (float32 in, float32/complex64 out).

One point (``n = 1``, an axis of one cell) is a transform like any other: the single mode is a
scale of the value (``v_0(0)``) with the eigenvalue of the 1x1 operator (0 for PP and NN, whose
mode is the constant; ``-4/h**2`` for DD and ``-2/h**2`` for ND and DN at cell centres, the ghost
mirrors). Face placement on a bounded axis of one cell has no unknown and is refused.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np

from daskflow.backend import array_module, cpu_threads

BCS = ("PP", "NN", "DD", "ND", "DN")
PLACEMENTS = ("c", "f")


class _Basis(NamedTuple):
    """``v_l(i) = func(pi (i + a)(l + b) / (m + dlen))``."""

    func: str
    a: float
    b: float
    dlen: float


#: (placement, bc) -> (scipy.fft function name, type) of the r2r transforms scipy has: ``forward`` is
#: the transform halved (scipy's unnormalised r2r carry a factor 2), ``backward`` the inverse type
#: (II <-> III; I and IV are their own) divided by ``L = m + dlen``
_SCIPY = {
    ("c", "NN"): ("dct", 2),
    ("c", "DD"): ("dst", 2),
    ("c", "ND"): ("dct", 4),
    ("c", "DN"): ("dst", 4),
    ("f", "NN"): ("dct", 2),
    ("f", "DD"): ("dst", 1),
}
_INVERSE_TYPE = {1: 1, 2: 3, 3: 2, 4: 4}

_BASES = {
    ("c", "NN"): _Basis("cos", 0.5, 0.0, 0.0),
    ("c", "DD"): _Basis("sin", 0.5, 1.0, 0.0),
    ("c", "ND"): _Basis("cos", 0.5, 0.5, 0.0),
    ("c", "DN"): _Basis("sin", 0.5, 0.5, 0.0),
    ("f", "NN"): _Basis("cos", 0.5, 0.0, 0.0),
    ("f", "DD"): _Basis("sin", 1.0, 1.0, 1.0),
    ("f", "ND"): _Basis("cos", 0.5, 0.5, 0.5),
    ("f", "DN"): _Basis("sin", 1.0, 0.5, 0.5),
}


def n_unknowns(bc: str, placement: str, n: int) -> int:
    """Number of unknowns ``m`` on an axis of ``n`` stored points."""
    if bc not in BCS:
        raise ValueError(f"bc must be one of {BCS}, got {bc!r}")
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    m = n if bc == "PP" or placement == "c" else n - 1
    if m < 1:
        raise ValueError(f"placement 'f' with bc {bc!r} on {n} point(s) leaves no unknowns (the only stored "
                         "face is the boundary)")
    return m


def spectral_size(bc: str, placement: str, n: int, complex_input: bool) -> int:
    """Length along the axis of ``forward``'s output."""
    m = n_unknowns(bc, placement, n)
    if bc == "PP" and not complex_input:
        return n // 2 + 1
    return m


def eigenvalues(bc: str, placement: str, n: int, spacing: float, complex_input: bool = False) -> np.ndarray:
    """Eigenvalues, shape ``(spectral_size,)`` float64 NumPy, in ``forward``'s output order."""
    size = spectral_size(bc, placement, n, complex_input)
    if bc == "PP":
        half_angle = np.pi * np.arange(size) / n
    else:
        basis = _BASES[placement, bc]
        half_angle = np.pi * (np.arange(size) + basis.b) / (2.0 * (size + basis.dlen))
    return -4.0 * np.sin(half_angle) ** 2 / spacing**2


def forward(x: Any, axis: int, bc: str, placement: str, overwrite: bool = False) -> Any:
    """Forward transform of ``x`` (``n`` stored points along ``axis``).

    Returns ``spectral_size(bc, placement, n, complex_input=iscomplex(x))`` points along ``axis``;
    complex for PP, ``x``'s dtype otherwise. The boundary face of ``"f"`` non-periodic is ignored.
    ``overwrite``: ``x`` may be destroyed (and, on NumPy, hold the result: no new array).
    """
    xp = array_module(x)
    m = n_unknowns(bc, placement, x.shape[axis])
    if xp is np:
        return _forward_host(x, axis, bc, placement, m, overwrite)
    return _built_forward(xp, x, axis, bc, placement, m)


def backward(X: Any, axis: int, bc: str, placement: str, n: int, real_output: bool, overwrite: bool = False,
             normalise: bool = True) -> Any:
    """Exact inverse of ``forward``; returns ``n_unknowns(bc, placement, n)`` points along ``axis``.

    PP: ``irfft(n=n)`` if ``real_output`` else ``ifft``; without ``normalise`` not divided by ``n``
    (the caller scales the result: one pass fewer). r2r: ``X``'s dtype, except that
    ``real_output`` with complex ``X`` transforms ``X.real`` only (its imaginary part must vanish);
    always normalised. ``overwrite``: ``X`` may be destroyed (and, on NumPy, hold the result: no new
    array).
    """
    xp = array_module(X)
    m = n_unknowns(bc, placement, n)
    expected = spectral_size(bc, placement, n, complex_input=not real_output)
    if X.shape[axis] != expected:
        raise ValueError(f"X has {X.shape[axis]} points along axis {axis}, expected {expected}")
    if xp is np:
        return _backward_host(X, axis, bc, placement, m, real_output, overwrite, normalise)
    return _built_backward(xp, X, axis, bc, placement, m, real_output, normalise)


# ---------------------------------------------------------------- NumPy: scipy.fft


def _forward_host(x: np.ndarray, axis: int, bc: str, placement: str, m: int, overwrite: bool) -> np.ndarray:
    import scipy.fft

    workers = cpu_threads()
    if bc == "PP":
        if np.iscomplexobj(x):
            return scipy.fft.fft(x, axis=axis, overwrite_x=overwrite, workers=workers)
        return scipy.fft.rfft(x, axis=axis, workers=workers)
    if m < x.shape[axis]:  # the boundary face of "f" is not an unknown: a view without it
        x = x[(slice(None),) * (axis % x.ndim) + (slice(0, m),)]
        overwrite = False  # a result in a strided view would only be copied again
    if (placement, bc) not in _SCIPY:
        return _trig_sum_host(x, axis, _BASES[placement, bc], inverse=False)
    name, kind = _SCIPY[placement, bc]
    out = getattr(scipy.fft, name)(x, type=kind, axis=axis, overwrite_x=overwrite, workers=workers)
    return _scale(out, 0.5)


def _backward_host(X: np.ndarray, axis: int, bc: str, placement: str, m: int, real_output: bool,
                   overwrite: bool, normalise: bool = True) -> np.ndarray:
    import scipy.fft

    workers = cpu_threads()
    if bc == "PP":
        norm = _norm(normalise)
        if real_output:  # c2r: scipy never reuses the input
            return scipy.fft.irfft(X, n=m, axis=axis, workers=workers, norm=norm)
        return scipy.fft.ifft(X, axis=axis, overwrite_x=overwrite, workers=workers, norm=norm)
    if real_output and np.iscomplexobj(X):
        X = X.real
        overwrite = False  # the result would be a strided view into complex memory
    basis = _BASES[placement, bc]
    if (placement, bc) not in _SCIPY:
        return _trig_sum_host(X, axis, basis, inverse=True)
    name, kind = _SCIPY[placement, bc]
    out = getattr(scipy.fft, name)(X, type=_INVERSE_TYPE[kind], axis=axis, overwrite_x=overwrite, workers=workers)
    return _scale(out, 1.0 / (m + basis.dlen))


def _scale(a: np.ndarray, factor: float) -> np.ndarray:
    """``a *= factor`` in place (a real factor: complex data as its real view where it has one)."""
    if np.iscomplexobj(a) and a.flags.c_contiguous:
        a.view(a.real.dtype)[...] *= factor
    else:
        a *= factor
    return a


def _trig_sum_host(y: np.ndarray, axis: int, basis: _Basis, inverse: bool) -> np.ndarray:
    """:func:`_trig_sum` along any ``axis`` with scipy's FFT (no move of the axis; complex input
    has its real and imaginary parts transformed apart)."""
    import scipy.fft

    if np.iscomplexobj(y):
        out = np.empty(y.shape, _complex_dtype(y))
        out.real = _trig_sum_host(y.real, axis, basis, inverse)
        out.imag = _trig_sum_host(y.imag, axis, basis, inverse)
        return out
    axis = axis % y.ndim
    m = y.shape[axis]
    shape = (m,) + (1,) * (y.ndim - 1 - axis)  # broadcasts along ``axis``
    pre, post = (t.reshape(shape) for t in _twiddles(np, _complex_dtype(y), basis, m, inverse, None))
    length2 = round(2 * (m + basis.dlen))
    spec = scipy.fft.fft(y * pre, n=length2, axis=axis, overwrite_x=True, workers=cpu_threads())
    spec = spec[(slice(None),) * axis + (slice(0, m),)]
    spec *= post
    return np.ascontiguousarray(spec.real)


# ---------------------------------------------------------------- CuPy: built from complex FFTs


def _built_forward(xp: ModuleType, x: Any, axis: int, bc: str, placement: str, m: int) -> Any:
    """``forward`` from ``xp.fft`` and elementwise ops (CuPy's path; runs on NumPy too)."""
    if bc == "PP":
        return xp.fft.fft(x, axis=axis) if xp.iscomplexobj(x) else xp.fft.rfft(x, axis=axis)
    y = xp.moveaxis(x, axis, -1)[..., :m]
    return xp.moveaxis(_r2r(xp, y, placement, bc, inverse=False), -1, axis)


def _norm(normalise: bool) -> str:
    """The FFT libraries' ``norm`` of an inverse transform divided by its length (or not)."""
    return "backward" if normalise else "forward"


def _built_backward(xp: ModuleType, X: Any, axis: int, bc: str, placement: str, m: int, real_output: bool,
                    normalise: bool = True) -> Any:
    """``backward`` from ``xp.fft`` and elementwise ops (CuPy's path; runs on NumPy too)."""
    if bc == "PP":
        norm = _norm(normalise)
        return xp.fft.irfft(X, n=m, axis=axis, norm=norm) if real_output else xp.fft.ifft(X, axis=axis, norm=norm)
    if real_output and xp.iscomplexobj(X):
        X = X.real
    z = xp.moveaxis(X, axis, -1)
    return xp.moveaxis(_r2r(xp, z, placement, bc, inverse=True), -1, axis)


def _r2r(xp: ModuleType, y: Any, placement: str, bc: str, inverse: bool) -> Any:
    """r2r transform (or its inverse) along the last axis of ``y`` (``m`` points)."""
    if xp.iscomplexobj(y):
        parts = _r2r(xp, xp.stack((y.real, y.imag)), placement, bc, inverse)
        return (parts[0] + 1j * parts[1]).astype(y.dtype, copy=False)
    if bc == "NN":
        return _idct2(xp, y, negate_odd=False) if inverse else _dct2(xp, y, negate_odd=False)
    if (placement, bc) == ("c", "DD"):
        # DST-II(x)_k = DCT-II((-1)^i x_i)_{m-1-k}
        if inverse:
            return _idct2(xp, y[..., ::-1], negate_odd=True)
        return _dct2(xp, y, negate_odd=True)[..., ::-1]
    return _trig_sum(xp, y, _BASES[placement, bc], inverse)


def _dct2(xp: ModuleType, y: Any, negate_odd: bool) -> Any:
    """``sum_i s_i y_i cos(pi (i + 1/2) k / m)`` (``s_i = (-1)^i`` if ``negate_odd``): Makhoul."""
    m = y.shape[-1]
    odd = y[..., 1::2][..., ::-1]
    v = xp.concatenate((y[..., 0::2], -odd if negate_odd else odd), axis=-1)
    (w,) = _twiddles(xp, _complex_dtype(y), "dct", m, False, _device(xp))
    u = xp.fft.rfft(v, axis=-1) * w
    return xp.concatenate((u.real, -u.imag[..., (m - 1) // 2 : 0 : -1]), axis=-1)


def _idct2(xp: ModuleType, z: Any, negate_odd: bool) -> Any:
    """Exact inverse of ``_dct2`` along the last axis."""
    m = z.shape[-1]
    half = m // 2
    cw, cwi = _twiddles(xp, _complex_dtype(z), "dct", m, True, _device(xp))
    spec = z[..., : half + 1] * cw
    spec[..., 1:] += cwi[1:] * z[..., m - 1 : m - half - 1 : -1]
    v = xp.fft.irfft(spec, n=m, axis=-1)
    out = xp.empty_like(v)
    n_even = (m + 1) // 2
    out[..., 0::2] = v[..., :n_even]
    odd = v[..., n_even:][..., ::-1]
    out[..., 1::2] = -odd if negate_odd else odd
    return out


def _trig_sum(xp: ModuleType, y: Any, basis: _Basis, inverse: bool) -> Any:
    """Generic r2r via one zero-padded FFT of length ``2L`` and pre/post twiddles.

    ``sum_j c_j y_j f(pi (j + p)(k + q) / L) = Re(post_k FFT_2L[pre_j y_j]_k)`` with
    ``pre_j = c_j exp(-i pi j q / L)``, ``post_k = exp(-i pi p (k + q) / L)`` (times ``i`` for sin);
    forward: ``p, q = a, b``, ``c = 1``; inverse: ``p, q = b, a``, ``c = 1 / norm``.
    """
    m = y.shape[-1]
    pre, post = _twiddles(xp, _complex_dtype(y), basis, m, inverse, _device(xp))
    length2 = round(2 * (m + basis.dlen))
    return (xp.fft.fft(y * pre, n=length2, axis=-1)[..., :m] * post).real


# ---------------------------------------------------------------- CuPy: cuFFT into given memory


def fft_into(x: Any, out: Any, inverse: bool = False, normalise: bool = True) -> Any:
    """The complex FFT of C-contiguous CuPy ``x`` along its last axis written into ``out`` (same
    shape and dtype, C-contiguous; may be ``x``: in place), normalised as ``cupy.fft`` (the inverse
    divided by the length, unless not ``normalise``), with the plan ``cupy.fft`` caches for the same
    length and batch (the GPU tests find ``cupy.fft``'s bits, in place too); unlike it, a view is
    transformed where it lies, with no copy (CuPy copies any array that is a view before it
    transforms it)."""
    from cupy.cuda import cufft

    kind = cufft.CUFFT_Z2Z if x.dtype == np.complex128 else cufft.CUFFT_C2C
    n = x.shape[-1]
    _plan(n, kind, x.size // n).fft(x, out, cufft.CUFFT_INVERSE if inverse else cufft.CUFFT_FORWARD)
    if inverse and normalise:
        out /= n
    return out


def irfft_into(X: Any, out: Any, normalise: bool = True) -> Any:
    """``cupy.fft.irfft`` of C-contiguous CuPy ``X`` along its last axis with ``n = out.shape[-1]``
    written into the C-contiguous real ``out`` (not divided by ``n`` unless ``normalise``); ``X`` is
    destroyed (cuFFT's c2r works in it)."""
    from cupy.cuda import cufft

    kind = cufft.CUFFT_Z2D if X.dtype == np.complex128 else cufft.CUFFT_C2R
    n = out.shape[-1]
    _plan(n, kind, out.size // n).fft(X, out, cufft.CUFFT_INVERSE)
    if normalise:
        out /= n
    return out


def _plan(n: int, kind: int, batch: int):
    """``cupy.fft``'s cached 1-D plan of length ``n`` (the output length) and ``batch`` transforms."""
    import cupy
    from cupy.cuda import cufft

    cache = cupy.fft.config.get_plan_cache()
    keys = (n, kind, batch, None)
    plan = cache.get(keys)
    if plan is None:
        plan = cache[keys] = cufft.Plan1d(n, kind, batch)
    return plan


def transforms_into(a: Any, out: Any, axis: int, real_output: bool = False) -> bool:
    """Whether :func:`fft_into` (or, with ``real_output``, :func:`irfft_into`) can take ``a`` to
    ``out`` along ``axis``: CuPy arrays, both C-contiguous, ``axis`` the last, ``a`` complex, and
    ``out`` of ``a``'s shape and dtype (real output: of its real dtype, ``n // 2 + 1`` modes in)."""
    xp = array_module(a)
    if not (xp is not np and axis % a.ndim == a.ndim - 1 and xp.iscomplexobj(a) and a.flags.c_contiguous
            and out.flags.c_contiguous and a.shape[:-1] == out.shape[:-1]):
        return False
    if real_output:
        return out.dtype == a.real.dtype and a.shape[-1] == out.shape[-1] // 2 + 1
    return out.dtype == a.dtype and out.shape == a.shape


def _complex_dtype(y: Any) -> np.dtype:
    return np.result_type(y.dtype, np.complex64)


def _device(xp: ModuleType) -> int | None:
    """Cache key for the device twiddles live on (CuPy arrays are per device)."""
    return None if xp is np else xp.cuda.runtime.getDevice()


@functools.lru_cache(maxsize=256)
def _twiddles(
    xp: ModuleType,
    cdtype: np.dtype,
    kind: _Basis | str,
    m: int,
    inverse: bool,
    device: int | None,
) -> tuple[Any, ...]:
    """Twiddle arrays (computed in float64 on the host, cast to ``cdtype``, moved to ``xp``)."""
    if kind == "dct":
        cw = np.exp(0.5j * np.pi * np.arange(m // 2 + 1) / m)
        host = (cw, -1j * cw) if inverse else (np.conj(cw),)
    else:
        p, q = (kind.b, kind.a) if inverse else (kind.a, kind.b)
        length = m + kind.dlen
        idx = np.arange(m)
        pre = np.exp(-1j * np.pi * idx * q / length)
        if inverse:
            double = (idx + kind.b == 0) | (idx + kind.b == length)
            pre /= np.where(double, length, length / 2)
        post = np.exp(-1j * np.pi * p * (idx + q) / length) * (1j if kind.func == "sin" else 1)
        host = (pre, post)
    return tuple(xp.asarray(t.astype(cdtype)) for t in host)
