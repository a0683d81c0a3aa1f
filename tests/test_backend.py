"""The host buffer pool: reuse exactly when nothing holds a buffer, never while anything does."""

import threading

import numpy as np
import pytest

from daskflow.backend import HostPool


def test_a_dropped_array_is_reused_in_any_shape_of_the_same_size():
    pool = HostPool(1 << 20, min_bytes=0)
    a = pool.empty((4, 5), np.float64, "F")
    assert a.shape == (4, 5) and a.flags.f_contiguous
    address = a.ctypes.data
    del a
    b = pool.empty((20,), np.float64)
    assert b.ctypes.data == address and pool.held_bytes == 160


def test_views_and_slices_keep_a_buffer_busy():
    pool = HostPool(1 << 20, min_bytes=0)
    a = pool.empty((8, 8), np.float64)
    a[:] = 1.0
    view = a[2:4].T
    address = a.ctypes.data
    del a
    b = pool.empty((8, 8), np.float64)
    assert b.ctypes.data != address  # the slice still uses the first buffer
    b[:] = 2.0
    assert (view == 1.0).all()
    del view, b
    assert pool.empty((64,), np.float64).ctypes.data in {address, pool._buffers[1].ctypes.data}


def test_sizes_do_not_mix_and_the_limit_holds():
    pool = HostPool(1000, min_bytes=0)
    a = pool.empty((100,), np.float64)  # 800 bytes: pooled
    b = pool.empty((10,), np.float64)  # 80 more: pooled
    c = pool.empty((100,), np.float64)  # over the limit: a plain array
    assert pool.held_bytes == 880 and len({a.ctypes.data, b.ctypes.data, c.ctypes.data}) == 3
    assert pool.empty((0, 3), np.float64).size == 0


def test_threads_never_share_a_buffer():
    pool = HostPool(1 << 26, min_bytes=0)
    seen, errors = [], []

    def work(value):
        for _ in range(200):
            a = pool.empty((64, 64), np.float64)
            a.fill(value)
            if not (a == value).all():
                errors.append(value)
            seen.append(a.ctypes.data)

    threads = [threading.Thread(target=work, args=(v,)) for v in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(pool._buffers) <= 4 * 2


@pytest.mark.parametrize("order", ["C", "F"])
def test_pooled_arrays_behave_like_empty(order):
    pool = HostPool(1 << 20, min_bytes=0)
    a = pool.empty((3, 4, 5), np.float32, order)
    ref = np.empty((3, 4, 5), np.float32, order=order)
    assert a.dtype == ref.dtype and a.strides == ref.strides


def test_small_arrays_are_plain_allocations():
    pool = HostPool(1 << 30, min_bytes=1 << 20)
    a = pool.empty((100, 100), np.float64)  # 80 kB
    assert pool.held_bytes == 0 and a.flags.owndata
    b = pool.empty((512, 512), np.float64)  # 2 MiB
    assert pool.held_bytes == b.nbytes and not b.flags.owndata


def test_idle_buffers_make_room_least_recently_used_first():
    pool = HostPool(2000, min_bytes=0)
    a, b = pool.empty((100,), np.float64), pool.empty((100,), np.float64)  # 1600 bytes held
    kept = b.ctypes.data
    del a, b
    c = pool.empty((120,), np.float64)  # 960 more: the idle buffer handed out first (a's) goes
    assert pool.held_bytes == 800 + 960
    assert [x.ctypes.data for x in pool._buffers if x.nbytes == 800] == [kept]
    big = pool.empty((250,), np.float64)  # 2000: b's buffer goes too, and still no room beside c
    assert big.flags.owndata and pool.held_bytes == 960
    del c


def test_device_constant_on_the_host_is_the_values_in_the_dtype():
    from daskflow.backend import device_constant

    out = device_constant(np, [0.5, 0.25, 0.125], np.float32)
    assert out.dtype == np.float32 and out.tolist() == [0.5, 0.25, 0.125]


@pytest.mark.gpu
def test_device_constant_is_uploaded_once_per_content_and_bounded(cupy, monkeypatch):
    from daskflow import backend

    monkeypatch.setattr(backend, "_CONSTANTS", {})
    monkeypatch.setattr(backend, "_CONSTANTS_KEPT", 3)
    widths = np.linspace(0.1, 0.2, 7)
    first = backend.device_constant(cupy, widths)
    assert backend.device_constant(cupy, widths.copy()) is first  # the same content: the kept upload
    assert backend.device_constant(cupy, widths, np.float32) is not first  # another dtype: another upload
    np.testing.assert_array_equal(first.get(), widths)
    for i in range(5):  # the oldest go first, the newest stay
        backend.device_constant(cupy, widths + i + 1)
    assert len(backend._CONSTANTS) == 3
    assert backend.device_constant(cupy, widths) is not first


def test_arrays_uploaded_together_keep_their_shapes_and_values():
    """One transfer for several small arrays: the packing and the views, on an array module that
    copies like a device upload would."""
    import types

    from daskflow.backend import upload_together

    device = types.SimpleNamespace(asarray=lambda a: np.array(a, copy=True))
    arrays = [np.arange(3.0), np.full((2, 1), 7.0), np.zeros(0), np.arange(4.0).reshape(2, 2)]
    moved = upload_together(device, arrays)
    assert [m.shape for m in moved] == [a.shape for a in arrays]
    for m, a in zip(moved, arrays, strict=True):
        np.testing.assert_array_equal(m, a)
    assert all(m.base is moved[0].base for m in moved)  # views of one buffer
    assert upload_together(np, arrays)[1] is arrays[1]
