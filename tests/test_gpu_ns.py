"""GPU twins of the Navier-Stokes checks: CuPy runs equal NumPy runs, divergence-free."""

import contextlib
import copy

import numpy as np
import pytest

from daskflow import Simulation
from tests.helpers import CHANNEL as BASE_CHANNEL
from tests.helpers import FLOW_RATE

pytestmark = pytest.mark.gpu

CHANNEL = {**BASE_CHANNEL, "physics": {"nu": 0.01, "forcing": FLOW_RATE}}


@pytest.mark.parametrize("implicit", ["none", "z", "xyz"])
@pytest.mark.parametrize("solver", [{"poisson": "ptdma", "pencils": [1, 1]}, {"poisson": "ptdma", "pencils": [2, 3]},
                                    {"poisson": "ftm", "pencils": [2, 2]}])
def test_cupy_simulation_equals_numpy(cupy, implicit, solver):
    runs = {}
    for device in ("cpu", "gpu"):
        cfg = copy.deepcopy(CHANNEL)
        cfg["time"]["implicit_diffusion"] = implicit
        cfg["solver"] = {**solver, "device": device}
        sim = Simulation(cfg).run(steps=10)
        assert isinstance(sim.state.u, cupy.ndarray if device == "gpu" else np.ndarray)
        runs[device] = sim
    for name in "uvwp":
        cpu = np.asarray(getattr(runs["cpu"].state, name))
        gpu = getattr(runs["gpu"].state, name).get()
        np.testing.assert_allclose(gpu, cpu, rtol=0, atol=1e-10 * np.abs(cpu).max())
    dz = runs["gpu"].grid.dzf.min()
    assert runs["gpu"].divergence_max() * dz / float(abs(runs["gpu"].state.u).max()) < 1e-11
    assert abs(runs["gpu"].bulk_velocity() - 0.6667) < 1e-12


@pytest.mark.parametrize("axes", [(), (0, 1), (0, 1, 2)])
def test_fused_explicit_kernel_matches_array_expressions(cupy, axes):
    from daskflow.grid import Grid
    from daskflow.ns import advection as adv
    from daskflow.ns import operators as ops
    from daskflow.ns.kernels import explicit_terms

    grid = Grid((10, 7, 12), (2.0, 1.0, 2.0), z_stretch=2.0)
    m = ops.Metrics.of(grid, False)
    rng = np.random.default_rng(3)
    padded = [rng.standard_normal((12, 9, 14)) for _ in range(3)]
    expected = adv.advection(*padded, m)
    expected = [e + 0.3 * ops.laplacian(f, m, i, axes) if axes else e
                for i, (e, f) in enumerate(zip(expected, padded, strict=True))]
    got = explicit_terms(*(cupy.asarray(p) for p in padded), m, 0.3, axes)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g.get(), e, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_padded_copies_on_the_gpu_equal_numpys(cupy, rng, dtype):
    """Padded copies on the GPU put every value where NumPy's do, into a single field and into each
    field of a stack (the halo's allocation), ghosts from the same rules."""
    from daskflow.ns import operators as ops
    from daskflow.ns.boundaries import ComponentBC

    fields = [rng.standard_normal((7, 5, 9)).astype(dtype) for _ in range(3)]
    bc = ComponentBC(("PP", "PP", "DD"), ((0.0, 0.0), (0.0, 0.0), (1.0, -1.0)))
    for got, want in zip(ops.padded_copies([cupy.asarray(f) for f in fields]), ops.padded_copies(fields), strict=True):
        np.testing.assert_array_equal(got[1:-1, 1:-1, 1:-1].get(), want[1:-1, 1:-1, 1:-1])
    for i, f in enumerate(fields):
        np.testing.assert_array_equal(ops.pad(cupy.asarray(f), bc, i).get(), ops.pad(f, bc, i))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_padding_kernel_equals_the_array_code_bit_for_bit(cupy, rng, dtype):
    """One launch pads a CuPy field (interior, faces, edges, corners); the plane-by-plane array code
    gives the same bits for every pair of boundary conditions, face or centred, and a strided input."""
    import itertools

    from daskflow.ns import operators as ops

    pairs = ["PP", "DD", "NN", "DN", "ND"]
    values = ((0.25, -1.5), (2.0, 0.5), (-0.75, 1.25))
    host = rng.standard_normal((6, 5, 7)).astype(dtype)
    strided = cupy.asarray(rng.standard_normal((6, 10, 7)).astype(dtype))[:, ::2, :]
    for bcs in itertools.product(pairs, repeat=3):
        for component in (None, 0, 1, 2):
            for a in (cupy.asarray(host), strided):
                got = ops.pad_with(a, bcs, values, component)
                with _array_code():
                    reference = ops.pad_with(a, bcs, values, component)
                assert got.flags.c_contiguous
                np.testing.assert_array_equal(got.get(), reference.get(), err_msg=f"{bcs} {component}")


@contextlib.contextmanager
def _array_code():
    """The CuPy operators through the array code (the fused kernels' reference)."""
    from daskflow.ns import operators as ops

    ops.FUSED_GPU = False
    try:
        yield
    finally:
        ops.FUSED_GPU = True


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_update_and_laplacian_kernels_equal_the_array_code_bit_for_bit(cupy, rng, dtype):
    """The RK update of a component (pressure gradient, body force, one or two explicit terms, with
    or without the old value, in place, plus an offset) and the second differences of a face or centred field along
    any axes, in one launch each: the array code's bits, strided operands included."""
    from daskflow.grid import Grid
    from daskflow.ns import operators as ops

    grid = Grid((6, 5, 7), (2.0, 1.0, 2.0), z_stretch=1.7)
    m = ops.Metrics.of(grid, False)
    P = cupy.asarray(rng.standard_normal((8, 7, 9)).astype(dtype))
    f = cupy.asarray(rng.standard_normal((6, 5, 7)).astype(dtype))
    a1 = cupy.asarray(rng.standard_normal((6, 5, 7)).astype(dtype))
    a2 = cupy.asfortranarray(cupy.asarray(rng.standard_normal((6, 5, 7)).astype(dtype)))
    for axis in range(3):
        for body in (0.0, 0.37):
            for terms in ((), ((0.31, a1),), ((0.31, a1), (-0.12, a2))):
                for old in (None, f):
                    got = ops.update(old, P, m, axis, 0.7, body, terms)
                    with _array_code():
                        want = ops.update(old, P, m, axis, 0.7, body, terms)
                    np.testing.assert_array_equal(got.get(), want.get(), err_msg=f"{axis} {body} {len(terms)}")
        inplace, reference = f.copy(), f.copy()
        ops.update(inplace, P, m, axis, 0.7, out=inplace)
        with _array_code():
            ops.update(reference, P, m, axis, 0.7, out=reference)
        np.testing.assert_array_equal(inplace.get(), reference.get())
        for offset in (0.123, cupy.asarray(-0.0456)):  # the flow-rate correction: a number, or on the device
            got = ops.update(f.copy(), P, m, axis, 0.7, out=None, offset=offset)
            want = ops.update(f.copy(), P, m, axis, 0.7)
            want += offset
            np.testing.assert_array_equal(got.get(), want.get(), err_msg=f"offset {offset}")
    for component in range(4):
        for axes in ((2,), (0, 1), (0, 1, 2), (2, 0)):
            got = ops.laplacian(P, m, component, axes, 0.013)
            added = ops.laplacian(P, m, component, axes, 0.013, out=a1.copy())
            with _array_code():
                want = ops.laplacian(P, m, component, axes, 0.013)
                want_added = ops.laplacian(P, m, component, axes, 0.013, out=a1.copy())
            np.testing.assert_array_equal(got.get(), want.get(), err_msg=f"{component} {axes}")
            np.testing.assert_array_equal(added.get(), want_added.get(), err_msg=f"{component} {axes} +=")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fused_second_differences_equal_the_array_codes_separate_passes(cupy, rng, dtype):
    """The predictor's update with the second differences of the padded component in the same pass,
    and the pressure update ``p + (phi - second differences of the padded phi)`` in one launch: the
    bits of the array code's separate operations, strided operands included."""
    from daskflow.grid import Grid
    from daskflow.ns import operators as ops

    grid = Grid((6, 5, 7), (2.0, 1.0, 2.0), z_stretch=1.7)
    m = ops.Metrics.of(grid, False)
    P = cupy.asarray(rng.standard_normal((8, 7, 9)).astype(dtype))
    A = cupy.asfortranarray(cupy.asarray(rng.standard_normal((8, 7, 9)).astype(dtype)))
    a1 = cupy.asarray(rng.standard_normal((6, 5, 7)).astype(dtype))
    a2 = cupy.asfortranarray(cupy.asarray(rng.standard_normal((6, 5, 7)).astype(dtype)))
    for axis in range(3):
        for axes in ((2,), (0, 1, 2), ()):
            for terms in (((0.31, a1),), ((0.31, a1), (-0.12, a2))):
                got = ops.update(None, P, m, axis, 0.7, 0.2 * (axis == 0), terms, diffusion=(A, axes, 0.013))
                with _array_code():
                    want = ops.update(None, P, m, axis, 0.7, 0.2 * (axis == 0), terms)
                    want = ops.laplacian(A, m, axis, axes, 0.013, out=want) if axes else want
                np.testing.assert_array_equal(got.get(), want.get(), err_msg=f"{axis} {axes} {len(terms)}")
    p, phi = a2, cupy.asarray(rng.standard_normal((6, 5, 7)).astype(dtype))
    Phi = A
    for axes in ((2,), (0, 1, 2), ()):
        got = ops.pressure_update(p, phi, Phi, m, axes, 0.021)
        with _array_code():
            want = p + (phi - ops.laplacian(Phi, m, 3, axes, 0.021)) if axes else p + phi
        np.testing.assert_array_equal(got.get(), want.get(), err_msg=f"{axes}")


HALO_FIELDS = [  # (pairs, values, component): a stack's fields with different wall rules on y and z
    (("PP", "DD", "DN"), ((0.0, 0.0), (0.3, -0.2), (0.5, 0.0)), 0),
    (("PP", "DD", "DD"), ((0.0, 0.0), (0.0, 0.0), (0.0, 0.0)), 1),
    (("PP", "ND", "DD"), ((0.0, 0.0), (0.0, 0.7), (-0.4, 0.25)), 2),
    (("PP", "NN", "NN"), ((0.0, 0.0), (0.0, 0.0), (0.0, 0.0)), None),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_halo_kernels_equal_the_array_code_bit_for_bit(cupy, rng, dtype):
    """A pencil's halo round on the GPU (the x-padded stack in one padding launch per field, then
    every y and z ghost in one launch) gives the array code's bits for every pattern of received
    faces and walls, edges received wherever both faces are, and periodic y from its neighbour."""
    import itertools

    from daskflow.ns import halo_kernels as fused
    from daskflow.ns import halos

    shape = (6, 5, 7)
    arrays = [cupy.asarray(rng.standard_normal(shape).astype(dtype)) for _ in HALO_FIELDS]
    arrays[1] = cupy.asfortranarray(arrays[1])
    bcs = [((pairs, values), component) for pairs, values, component in HALO_FIELDS]
    stack, block, rules = halos.prepare(arrays, bcs)
    with _array_code():
        want_stack, want_block, _ = halos.prepare(arrays, bcs)
    np.testing.assert_array_equal(block.get(), want_block.get())
    count, nx2 = len(arrays), shape[0] + 2

    def piece(oy, oz):
        return cupy.asarray(rng.standard_normal((count, nx2, shape[1] if oy == 0 else 1,
                                                 shape[2] if oz == 0 else 1)).astype(dtype))

    periodic_y = [(("PP", "PP", p[2]), (v[0], v[1], v[2]), c) for p, v, c in HALO_FIELDS]
    for fields, faces in itertools.product((HALO_FIELDS, periodic_y), itertools.product((False, True), repeat=4)):
        if fields is periodic_y and not (faces[0] and faces[1]):
            continue
        received = {key: piece(*key) for key, got in zip(fused.HALO_PIECES[:4], faces, strict=True) if got}
        received.update({(oy, oz): piece(oy, oz) for oy in (-1, 1) for oz in (-1, 1)
                         if (oy, 0) in received and (0, oz) in received})
        got, want = stack.copy(), stack.copy()
        got[:, :, :, :] = cupy.asarray(rng.standard_normal(got.shape).astype(dtype))
        want[...] = got
        halos.fill_halos(got, fields, received)
        with _array_code():
            halos.fill_halos(want, fields, received)
        np.testing.assert_array_equal(got.get(), want.get(), err_msg=f"{faces} periodic y {fields is periodic_y}")
    with pytest.raises(ValueError, match="periodic axis y"):
        halos.fill_halos(stack, periodic_y, {})


@pytest.mark.parametrize("z_walls", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_z_ghosts_padded_with_the_fields_give_the_array_codes_bits(cupy, rng, dtype, z_walls):
    """On a z side that is a wall (one z chunk between walls, or the first or last of several) the
    padding launch also sets the z ghosts of the interior y rows and the ring launch only the y
    ghosts, the other side's plane and the corners: the bits of the array code's round, for every
    pattern of received y faces and a periodic y."""
    import itertools

    from daskflow.ns import halos

    shape = (6, 5, 7)
    arrays = [cupy.asarray(rng.standard_normal(shape).astype(dtype)) for _ in HALO_FIELDS]
    arrays[1] = cupy.asfortranarray(arrays[1])
    periodic_y = [(("PP", "PP", p[2]), v, c) for p, v, c in HALO_FIELDS]
    count, nx2 = len(arrays), shape[0] + 2

    def piece(oy, oz):
        return cupy.asarray(rng.standard_normal((count, nx2, shape[1] if oy == 0 else 1,
                                                 shape[2] if oz == 0 else 1)).astype(dtype))

    for fields, faces in itertools.product((HALO_FIELDS, periodic_y), itertools.product((False, True), repeat=2)):
        if fields is periodic_y and not all(faces):
            continue
        bcs = [((pairs, values), component) for pairs, values, component in fields]
        received = {(oy, 0): piece(oy, 0) for oy, got in zip((-1, 1), faces, strict=True) if got}
        for oz in [2 * side - 1 for side, wall in enumerate(z_walls) if not wall]:  # a z neighbour there
            received[(0, oz)] = piece(0, oz)
            received.update({(oy, oz): piece(oy, oz) for oy in (-1, 1) if (oy, 0) in received})
        got, _, rules = halos.prepare(arrays, bcs, z_walls=z_walls)
        halos.fill_halos(got, rules, received, z_walls=z_walls)
        with _array_code():
            want, _, rules = halos.prepare(arrays, bcs)
            halos.fill_halos(want, rules, received)
        np.testing.assert_array_equal(got.get(), want.get(), err_msg=f"{faces} periodic y {fields is periodic_y}")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_halo_pieces_cut_from_the_fields_equal_the_padded_stacks_bit_for_bit(cupy, rng, dtype):
    """The faces and edges a pencil sends, cut from its unpadded fields in one launch per field
    (walls and a periodic x, a Fortran-ordered field among them), are the pieces cut from its x-padded
    stack, for the offsets of pencils alone on, first or inside a periodic or bounded axis."""
    from daskflow.ns import halo_kernels as fused
    from daskflow.ns import halos
    from daskflow.ns import operators as ops
    from daskflow.pencils import halo

    shape = (6, 5, 7)
    arrays = [cupy.asarray(rng.standard_normal(shape).astype(dtype)) for _ in HALO_FIELDS]
    arrays[1] = cupy.asfortranarray(arrays[1])
    for x_pair in ("PP", "DN", "ND"):
        fields = [((x_pair, *pairs[1:]), ((0.3, -0.6), *values[1:]), c) for pairs, values, c in HALO_FIELDS]
        _, block, _ = halos.prepare(arrays, [((p, v), c) for p, v, c in fields])
        x_rules = [[ops.ghost_rule(p[0], side, c == 0) for side in (0, 1)] for p, _, c in fields]
        x_walls = [v[0] for _, v, _ in fields]
        for counts, periodic, key in (((3, 3), (True, False), (1, 1)), ((2, 1), (True, False), (0, 0)),
                                      ((1, 2), (True, True), (0, 1)), ((3, 2), (False, False), (0, 0))):
            offsets = halo.sent(key, counts, periodic)
            got = fused.pack_halo(arrays, x_rules, x_walls, offsets)
            assert sorted(got) == sorted(offsets)
            for oy, oz in offsets:
                dst = halo.neighbour(key, (-oy, -oz), counts, periodic)
                want = halo.cut(key, block, dst, counts, periodic)[(oy, oz)]
                np.testing.assert_array_equal(got[(oy, oz)].get(), want.get(),
                                              err_msg=f"x {x_pair} {counts} {key} {(oy, oz)}")


def test_a_gpu_duct_at_2x2_equals_its_one_pencil_run(cupy):
    """Walls on y and z with moving walls on the GPU: the in-process team of four pencils (the halo
    kernels' faces, edges and wall ghosts) gives the one-pencil fields to 1e-12."""
    from tests.test_pencil_team import DUCT, _assert_same_fields, _config

    cfgs = [_config(DUCT, "z", pencils) for pencils in ((1, 1), (2, 2))]
    for cfg in cfgs:
        cfg["solver"]["device"] = "gpu"
    reference, sim = (Simulation(cfg).run(steps=10) for cfg in cfgs)
    assert isinstance(sim.state.u, cupy.ndarray)
    _assert_same_fields(sim, reference, 1e-12)


@pytest.mark.parametrize("pencils", [(2, 1), (3, 1)], ids=["2x1", "3x1"])
def test_gpu_pressure_rows_from_the_transpose_give_the_halo_paths_bits(cupy, monkeypatch, pencils):
    """On the GPU at pencils (py, 1), periodic y: the pressure padded from the rows that came with
    the y->x transpose (the cut with rows, the CuPy swaps into the padded array) gives the fields of
    the run that pads it through a halo round, bit for bit."""
    from daskflow.ns.domain import FlowDomain
    from tests.test_pencil_team import CHANNEL, _config

    cfg = _config(CHANNEL, "z", pencils)
    cfg["solver"]["device"] = "gpu"
    sim = Simulation(cfg).run(steps=6)
    assert sim.stepper.domain.pressure_rows_in_transpose and isinstance(sim.state.u, cupy.ndarray)
    monkeypatch.setattr(FlowDomain, "pressure_rows_in_transpose", property(lambda self: False))
    reference = Simulation(cfg).run(steps=6)
    for name in "uvwp":
        np.testing.assert_array_equal(getattr(sim.state, name).get(), getattr(reference.state, name).get(),
                                      err_msg=name)


@pytest.mark.parametrize("dt, dtype", [(None, "float64"), (0.01, "float64"), (None, "float32")],
                         ids=["cfl", "fixed-dt-graphs", "float32"])
def test_a_gpu_pencils_scalars_wait_on_the_device_for_the_flush(cupy, tmp_path, monkeypatch, dt, dtype):
    """One pencil on the GPU keeps every step's scalars on the device until a flush takes them in
    one wait: the store holds a record per step, the last equal to the record of the final state
    computed at once (``diagnostics``), and no record was computed the immediate way; with a fixed
    step the steps replay a CUDA graph, which overwrites its fields in place at every step."""
    import xarray as xr

    from daskflow.io import output
    from tests.test_pencil_team import CHANNEL, _config

    cfg = _config(CHANNEL, "z")
    cfg["solver"].update(device="gpu", dtype=dtype)
    if dt is not None:
        cfg["time"]["dt"] = dt
    cfg["output"] = {"store": str(tmp_path / "run.zarr"), "scalars_every": 1, "profiles_every": 0,
                     "checkpoint_every": 0}
    immediate = []
    flow_scalars = output.flow_scalars
    monkeypatch.setattr(output, "flow_scalars", lambda *a: immediate.append(1) or flow_scalars(*a))
    sim = Simulation(cfg).run(steps=5)
    assert not immediate
    scalars = xr.open_zarr(str(tmp_path / "run.zarr"), group="scalars")
    assert scalars.step.values.tolist() == [1, 2, 3, 4, 5]
    for name, value in sim.diagnostics().items():
        assert float(scalars[name].values[-1]) == value, name


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_divergence_and_rate_kernels_equal_the_array_code(cupy, rng, dtype):
    """The divergence of padded face velocities (strided operands too) in one launch gives the
    array code's bits; the CFL rate in one reduction gives its maximum."""
    from daskflow.grid import Grid
    from daskflow.ns import operators as ops
    from daskflow.ns.stepper import State, Stepper

    grid = Grid((6, 5, 7), (2.0, 1.0, 2.0), z_stretch=1.7)
    m = ops.Metrics.of(grid, False)
    padded = [cupy.asarray(rng.standard_normal((8, 7, 9)).astype(dtype)) for _ in range(3)]
    padded[1] = cupy.asfortranarray(padded[1])
    for scale in (1.0, 0.37):
        got = ops.divergence(*padded, m, scale)
        with _array_code():
            want = ops.divergence(*padded, m, scale)
        np.testing.assert_array_equal(got.get(), want.get(), err_msg=str(scale))
    fields = [p[1:-1, 1:-1, 1:-1].copy() for p in padded]
    state = State(*fields, p=fields[0])
    stepper = Stepper.__new__(Stepper)
    stepper.domain = type("Domain", (), {"metrics": m})()
    got = stepper.local_rate(state)
    with _array_code():
        want = stepper.local_rate(state)
    assert got == want


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_flow_rate_sum_kernel_equals_the_array_code_to_rounding(cupy, rng, dtype):
    """``sum(u dz)`` in one launch: the array code's float64 value to rounding, over a z length that
    does not divide the kernel's grid, a field of one z point and an empty one; a strided field
    takes the array code itself."""
    from daskflow.ns.domain import weighted_sum

    for shape in ((37, 29, 61), (5, 4, 1), (0, 3, 4)):
        u = cupy.asarray(rng.standard_normal(shape).astype(dtype))
        dz = rng.uniform(0.1, 1.0, shape[2])
        got = weighted_sum(u, dz)
        with _array_code():
            want = weighted_sum(u, dz)
        assert got.dtype == want.dtype == np.float64 and got.shape == ()
        scale = float(abs(u).astype(np.float64).sum()) * dz.max()
        assert abs(float(got) - float(want)) <= 1e-14 * max(scale, 1.0), shape
    strided = cupy.asarray(rng.standard_normal((6, 10, 7)))[:, ::2, :]
    dz = rng.uniform(0.1, 1.0, 7)
    assert float(weighted_sum(strided, dz)) == float((strided * cupy.asarray(dz)[None, None, :]).sum())


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_z_solve_of_a_c_ordered_gpu_field_runs_along_its_rows_with_the_column_bits(cupy, rng, dtype):
    """The z-implicit solve of a C-ordered CuPy field solves its z rows in place (no transposed copy)
    and gives the bits of the column solve, for a centred field (all of z) and a face field (the
    last plane is the wall's and stays), over rows not a multiple of a warp."""
    from daskflow import tridiagonal
    from daskflow.stencils import Tridiagonal
    from daskflow.zsolve import shared

    nz = 75
    for m in (nz, nz - 1):
        lower, upper = -rng.uniform(0.1, 0.5, m), -rng.uniform(0.1, 0.5, m)
        op = Tridiagonal(lower, 1.0 - lower - upper, upper, False)
        field = cupy.asarray(rng.standard_normal((7, 9, nz)).astype(dtype))
        want = field.copy()
        cols = shared.z_columns(want, m)
        factored = tridiagonal.FactoredTridiagonal.factor(lower[:, None], op.diag[:, None], upper[:, None], False)
        factored.to(cupy).solve(cols, overwrite=True)
        shared.store_columns(want, cols, m)
        got = field.copy()
        assert shared.solve_locally({}, got, op, ("z", m)) is got
        np.testing.assert_array_equal(got.get(), want.get(), err_msg=str(m))
        assert not tridiagonal.solve_rows_in_place(factored.to(cupy), cupy.asfortranarray(field))


@pytest.mark.parametrize("implicit", ["none", "z", "xyz"])
@pytest.mark.parametrize("time", [{"dt": 0.01}, {"cfl": 0.5, "dt_max": 0.002}, {"cfl": 0.5, "dt_max": 0.05}],
                         ids=["fixed-dt", "cfl-held-at-dt_max", "cfl"])
def test_a_captured_step_gives_the_uncaptured_fields_bit_for_bit(cupy, implicit, time):
    """Steps replayed from a CUDA graph (a fixed dt, or the CFL step held at dt_max) give the fields,
    clock and forcing of the uncaptured steps bit for bit; a step size that changes every step is
    never captured, and the steps run as before."""
    import dask

    import daskflow.settings  # noqa: F401 - its keys registered before the override, not inside it

    runs = {}
    for points in (0, 1 << 22):
        cfg = copy.deepcopy(CHANNEL)
        cfg["time"] = {**time, "implicit_diffusion": implicit}
        cfg["solver"] = {"pencils": [1, 1], "device": "gpu"}
        with dask.config.set({"daskflow.cuda-graph-points": points}):
            runs[points] = Simulation(cfg).run(steps=8)
    plain, graphed = runs[0], runs[1 << 22]
    assert plain._local.steppers[0].graphs is None
    graphs = graphed._local.steppers[0].graphs
    if time.get("dt_max") != 0.05:
        assert graphs.graph is not None and not graphs.failed
    for name in "uvwp":
        assert np.array_equal(getattr(plain.state, name).get(), getattr(graphed.state, name).get()), name
    assert (plain.state.time, plain.state.step, plain.state.forcing_gradient) == \
        (graphed.state.time, graphed.state.step, graphed.state.forcing_gradient)
