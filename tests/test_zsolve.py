"""The z-solve layer: the choice of solve, a column group's reduced rows, and the shared-matrix
solves across the chunks of a column group (a team of threads) against one local solve."""

import numpy as np
import pytest

from daskflow.backend import to_numpy
from daskflow.pencils import Decomposition
from daskflow.pencils.executor import Member
from daskflow.pencils.team import Team
from daskflow.stencils import Tridiagonal
from daskflow.zsolve.choice import ZSolve
from daskflow.zsolve.group import reduced_offsets
from daskflow.zsolve.shared import add_addend, solve_distributed, solve_locally


def test_one_choice_of_z_solve_for_every_method_and_decomposition():
    assert ZSolve.of("ptdma", 1).kind == ZSolve.of("ftm", 1).kind == "local"
    assert ZSolve.of("ptdma", 3).kind == "ptdma" and ZSolve.of("ftm", 3).kind == "ftm"
    assert ZSolve.of("ptdma", 2).gathers and not ZSolve.of("ptdma", 3).gathers
    with pytest.raises(ValueError, match="'thomas'"):
        ZSolve.of("thomas", 2)


def test_each_chunk_adds_its_first_and_last_row_to_the_reduced_system():
    """Two rows, one for a chunk of one unknown, none for a chunk without (a wall face alone)."""
    rows = [slice(0, 5), slice(5, 6), slice(6, 6), slice(6, 8)]
    assert reduced_offsets(rows).tolist() == [0, 2, 3, 3, 5]


def _operator(rng, m: int, periodic: bool) -> Tridiagonal:
    lower, upper = rng.uniform(0.1, 0.5, m), rng.uniform(0.1, 0.5, m)
    return Tridiagonal(-lower, 1.0 + lower + upper + rng.uniform(0, 0.5, m), -upper, periodic)


def _solve_on_a_team(shape, pencils, fields: dict, operators: dict, place=np.asfortranarray,
                     addends: dict | None = None) -> dict:
    """``solve_distributed`` by every participant of a team on its x-pencil (``place``: the chunk as the
    participant holds it; ``addends``: whole fields added to the solutions); the solved fields whole,
    as NumPy arrays."""
    dec = Decomposition(shape, shape[:2], pencils)
    team = Team(pencils[0] * pencils[1])
    out = {c: np.empty(shape, order="F") for c in fields}

    def body(i: int) -> None:
        me = team.members[i]
        member = Member(me, team.members, pencils[1], team.transports[me], "test")
        key = next(k for k in dec.indices if member.owner(k) == me)
        where = (slice(None), dec.y[key[0]], dec.z[key[1]])
        mine = {c: place(f[where]) for c, f in fields.items()}
        added = None if addends is None else {c: place(f[where]) for c, f in addends.items()}
        solved = solve_distributed(member.executor(None, "z"), dec, key, {}, mine, operators, 0.1, added)
        for c, f in solved.items():
            assert f is mine[c]  # in place
            out[c][where] = to_numpy(f)

    team.run(body)
    return out


@pytest.mark.parametrize("pencils", [(2, 2), (1, 3), (2, 4)])
@pytest.mark.parametrize("periodic", [False, True])
def test_shared_matrix_solves_across_a_column_group_equal_one_local_solve(pencils, periodic):
    """Both round structures (the all-gather at pz = 2, column slices beyond) and a component whose
    last stored plane is a wall face (one unknown fewer: the top chunk's stored face is left alone)."""
    rng = np.random.default_rng(4)
    shape = (5, 6, 11)
    operators = {0: _operator(rng, shape[2], periodic), 2: _operator(rng, shape[2] - 1, periodic)}
    fields = {c: np.asfortranarray(rng.standard_normal(shape)) for c in operators}
    want = {c: solve_locally({}, f.copy(order="F"), operators[c], (c, 0.1)) for c, f in fields.items()}
    got = _solve_on_a_team(shape, pencils, fields, operators)
    for c in operators:
        np.testing.assert_allclose(got[c], want[c], rtol=0, atol=1e-13 * np.abs(want[c]).max())
    np.testing.assert_array_equal(got[2][:, :, -1], fields[2][:, :, -1])


@pytest.mark.gpu
@pytest.mark.parametrize("pencils", [(1, 2), (2, 3)])
@pytest.mark.parametrize("periodic", [False, True])
@pytest.mark.parametrize("nz", [83, 5])
def test_a_c_ordered_gpu_field_is_reduced_along_its_rows_in_two_sweeps(cupy, pencils, periodic, nz):
    """C-ordered CuPy chunks are reduced and reconstructed along their z rows (no transposed copy, two
    sweeps); the solution is that of Fortran-ordered chunks solved as columns (Algorithm 2) to
    rounding, and bit for bit where no chunk has an interior (nz = 5: chunks of 1 to 3 rows), over
    rows not a multiple of a warp and chunks longer than a tile."""
    rng = np.random.default_rng(5)
    shape = (5, 7, nz)
    operators = {0: _operator(rng, shape[2], periodic), 2: _operator(rng, shape[2] - 1, periodic)}
    fields = {c: np.asfortranarray(rng.standard_normal(shape)) for c in operators}
    rows = _solve_on_a_team(shape, pencils, fields, operators, lambda a: cupy.asarray(np.ascontiguousarray(a)))
    columns = _solve_on_a_team(shape, pencils, fields, operators, lambda a: cupy.asfortranarray(cupy.asarray(a)))
    want = {c: solve_locally({}, f.copy(order="F"), operators[c], (c, 0.1)) for c, f in fields.items()}
    for c in operators:
        np.testing.assert_allclose(rows[c], columns[c], rtol=0, atol=1e-14 * np.abs(want[c]).max())
        np.testing.assert_allclose(rows[c], want[c], rtol=0, atol=1e-13 * np.abs(want[c]).max())
        if nz == 5 and pencils[1] == 3:
            np.testing.assert_array_equal(rows[c], columns[c])


@pytest.mark.parametrize("pencils", [(1, 1), (2, 2), (1, 3)])
def test_an_addend_is_added_to_the_solutions(pencils):
    """``u + du`` from the solves: the solutions plus the addends, bit for bit, the stored wall face
    of a component with one unknown fewer included."""
    rng = np.random.default_rng(6)
    shape = (5, 6, 11)
    operators = {0: _operator(rng, shape[2], False), 2: _operator(rng, shape[2] - 1, False)}
    fields = {c: np.asfortranarray(rng.standard_normal(shape)) for c in operators}
    addends = {c: np.asfortranarray(rng.standard_normal(shape)) for c in operators}
    copies = lambda: {c: f.copy(order="F") for c, f in fields.items()}  # noqa: E731 - solved in place
    plain = _solve_on_a_team(shape, pencils, copies(), operators)
    got = _solve_on_a_team(shape, pencils, copies(), operators, addends=addends)
    for c in operators:
        np.testing.assert_array_equal(got[c], addends[c] + plain[c])


@pytest.mark.gpu
@pytest.mark.parametrize("pencils", [(1, 1), (1, 2), (2, 3)])
def test_gpu_solves_along_rows_add_the_addend_in_their_last_pass(cupy, pencils):
    """C-ordered CuPy chunks (Thomas along rows at pz = 1, P-TDMA's reconstruction beyond) add the
    addend as they store the solution: the solutions plus the addends bit for bit, the wall face
    beyond the unknowns included; an addend of another layout is added after the solve."""
    rng = np.random.default_rng(7)
    shape = (5, 7, 83)
    operators = {0: _operator(rng, shape[2], False), 2: _operator(rng, shape[2] - 1, False)}
    fields = {c: np.asfortranarray(rng.standard_normal(shape)) for c in operators}
    addends = {c: np.asfortranarray(rng.standard_normal(shape)) for c in operators}
    rows = lambda a: cupy.asarray(np.ascontiguousarray(a))  # noqa: E731
    plain = _solve_on_a_team(shape, pencils, fields, operators, rows)
    got = _solve_on_a_team(shape, pencils, fields, operators, rows, addends)
    for c in operators:
        np.testing.assert_array_equal(got[c], addends[c] + plain[c])
    field, alone = rows(fields[0]), rows(fields[0])
    fortran = cupy.asfortranarray(cupy.asarray(addends[0]))
    assert solve_locally({}, field, operators[0], (0, 0.1), fortran) is field
    solve_locally({}, alone, operators[0], (0, 0.1))
    np.testing.assert_array_equal(cupy.asnumpy(field), addends[0] + cupy.asnumpy(alone))


def test_add_addend_completes_what_a_solve_along_rows_added():
    """A solve along rows adds the addend to its first ``added`` z values (the unknowns): the rest,
    the stored wall face, is added here; nothing added, the whole field; no addend, nothing."""
    rng = np.random.default_rng(8)
    field, addend = rng.standard_normal((3, 4, 6)), rng.standard_normal((3, 4, 6))
    partly = field.copy()
    partly[..., :5] += addend[..., :5]  # what the kernels leave
    assert add_addend(partly, addend, 5) is partly
    np.testing.assert_array_equal(partly, field + addend)
    whole = field.copy()
    np.testing.assert_array_equal(add_addend(whole, addend), field + addend)
    assert add_addend(whole, None) is whole
