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
