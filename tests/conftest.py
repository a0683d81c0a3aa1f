import numpy as np
import pytest

from daskflow.backend import cupy_or_none
from daskflow.ns import operators as ops


@pytest.fixture(scope="session")
def cupy():
    """The CuPy module on a machine with a CUDA device; skips the test otherwise."""
    cp = cupy_or_none()
    if cp is None:
        pytest.skip("needs CuPy and a CUDA device")
    return cp


@pytest.fixture
def rng():
    return np.random.default_rng(20261126)


@pytest.fixture(params=[(1 << 20, 1), (150, 1), (150, 2)], ids=["one-slab", "slabs", "slabs-2-threads"])
def blocking(request, monkeypatch):
    """Threads for the blocked NumPy operators, run as one slab, many slabs, and many on 2 threads."""
    points, threads = request.param
    monkeypatch.setattr(ops, "SLAB_POINTS", points)
    return threads


@pytest.fixture(params=["compiled", "array-code"])
def cpu_path(request, monkeypatch):
    """The NumPy operators through the compiled loops (skipped without Numba) and through the array
    code; the kernels equal the array code to round-off."""
    from daskflow.backend import numba_or_none

    if request.param == "compiled" and numba_or_none() is None:
        pytest.skip("needs Numba")
    monkeypatch.setenv("DASKFLOW_NUMBA", "1" if request.param == "compiled" else "0")
    return request.param


@pytest.fixture(autouse=True)
def _auto_times_nccl_and_the_mailbox(monkeypatch):
    """``cluster.comm: auto`` times every usable backend; UCX is usable wherever UCXX is installed,
    which would make the suite's set-ups (and their timings) differ between machines. Tests leave
    it out of ``auto``'s candidates; the UCX tests name it."""
    from daskflow.pencils import transport

    monkeypatch.setitem(transport.USABLE, "ucx", lambda *_: False)
