import numpy as np
import pytest

from daskflow.backend import cupy_or_none


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
