"""The communication/cost model: exact byte and task counts against the code, limits, calibration."""

import json
import math

import dask.array as da
import numpy as np
import pytest

from daskflow import Grid, PoissonSolver
from daskflow import perfmodel as pm
from daskflow.poisson.distributed import build_graph, home_chunks


def _names(exchanges):
    return [e.name for e in exchanges]


def test_ftm_x_to_y_bytes_by_hand():
    # (8, 4, 4), PP in x: 5 complex x modes split (3, 2); chunk (p, 0) holds 4 z x 2 y rows
    (xy, yx) = pm.poisson_exchanges("ftm", (8, 4, 4), (2, 1), 2)
    assert (xy.name, yx.name) == ("x->y", "y->x")
    assert xy.total_bytes == 4 * 4 * 5 * 16  # the whole spectral field
    assert xy.remote_bytes == 4 * 2 * 2 * 16 + 4 * 2 * 3 * 16  # p=0 sends xs_1 = 2 modes, p=1 sends 3
    assert xy.bytes_out == 4 * 2 * 3 * 16  # the busiest GPU
    assert xy.peers == 1 and xy.pieces == 4 and xy.sources_per_destination == 2
    assert yx.total_bytes == xy.total_bytes and yx.remote_bytes == xy.remote_bytes


def test_ptdma_gather_and_scatter_bytes_by_hand():
    gather, scatter = pm.poisson_exchanges("ptdma", (8, 4, 4), (1, 2), 2)
    rows = 2 * 2 * 5 * 16  # two boundary rows x 2 y modes of the slice x 5 x modes, complex
    raw = 2 * 16  # the singular (0, 0) column's right-hand side of a 2-point chunk, to slice 0
    assert gather.total_bytes == 2 * (rows + raw) + 2 * rows
    assert gather.remote_bytes == (rows + raw) + rows  # q=1 -> slice 0 and q=0 -> slice 1
    assert scatter.total_bytes == gather.total_bytes
    assert gather.sources_per_destination == 2


def test_decomposition_limits():
    assert _names(pm.poisson_exchanges("ftm", (16, 16, 16), (1, 4), 4)) == ["y->z", "z->y"]  # py = 1: no x->y
    assert _names(pm.poisson_exchanges("ptdma", (16, 16, 16), (1, 4), 4)) == ["gather", "scatter"]
    for method in ("ftm", "ptdma"):  # pz = 1: no reduced system, no y->z
        assert _names(pm.poisson_exchanges(method, (16, 16, 16), (4, 1), 4)) == ["x->y", "y->x"]
        assert pm.poisson_exchanges(method, (16, 16, 16), (1, 1), 1) == []
    one = pm.predict_solve("ptdma", (64, 64, 64), (1, 1), 1)
    assert one["transfer_s"] == one["latency_s"] == 0 and one["exchanges"] == 0


def test_all_chunks_on_one_gpu_move_nothing():
    for e in pm.poisson_exchanges("ptdma", (16, 16, 16), (2, 2), 1):
        assert e.remote_bytes == 0 and e.transfer_s == 0 and e.latency_s == 0


def test_ptdma_moves_less_than_ftm_and_bytes_shrink_with_py():
    def out(method, pencils):
        return pm.predict_solve(method, (256, 256, 256), pencils, 4)["bytes_out_per_gpu"]

    assert out("ptdma", (2, 2)) < out("ftm", (2, 2))
    assert out("ptdma", (1, 4)) < out("ftm", (1, 4)) / 10
    gather = {py: pm.poisson_exchanges("ptdma", (64, 64, 64), (py, 4), 4 * py)[-2].bytes_out for py in (1, 2, 4)}
    assert gather[1] > gather[2] > gather[4]  # paper section 2.2.2: boundary bytes per task fall as 1 / py


def test_halo_and_z_solve_bytes_by_hand():
    nx, ny, nz = 8, 6, 4
    ex = {e.name: e for e in pm.step_exchanges((nx, ny, nz), (2, 2), 4)}
    # one exchange per pad, per chunk: y periodic with 2 chunks gives both y faces (nz_q = 2 deep) from
    # the one y neighbour; the z walls one z face (ny_p = 3 wide) from the other z chunk; the diagonal
    # chunk sends the two edge lines on the side facing the z neighbour
    per_chunk = (nx + 2) * (2 * 2 + 3 + 2)
    assert ex["halo-x3"].total_bytes == 4 * per_chunk * 3 * 8
    assert ex["halo-x1"].total_bytes == 4 * per_chunk * 1 * 8
    assert ex["halo-x4"].peers == 3
    # z-solve all-gather: two boundary rows of nx * ny_p columns to each of the pz chunks
    assert ex["zsolve-u"].total_bytes == 4 * 2 * 2 * nx * 3 * 8
    assert ex["bulk-allreduce"].total_bytes == 16 * 8
    assert not any(n.startswith("zsolve") for n in (e.name for e in pm.step_exchanges((nx, ny, nz), (2, 1), 2)))


GRIDS = [Grid((16, 16, 16)), Grid((9, 8, 8)), Grid((12, 10, 7)), Grid((16, 3, 12))]


@pytest.mark.parametrize("method", ["ftm", "ptdma"])
def test_task_count_equals_the_graph_builder(method):
    for grid in GRIDS:
        for pencils in [(1, 1), (2, 1), (1, 2), (2, 2), (3, 2), (1, 4), (4, 4), (2, 3)]:
            try:
                solver = PoissonSolver(grid, ("PP", "PP", "NN"), "ccc", method, pencils)
            except ValueError:
                continue  # a decomposition the grid cannot take
            b = da.zeros(grid.shape, chunks=home_chunks(solver))
            nys = solver.plan.decomposition.spectral[1]
            assert pm.task_count(method, pencils, nys) == len(build_graph(solver, b).tasks), (grid.shape, pencils)


def test_fused_task_count_equals_the_graph_builder():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        for pencils in [(2, 2), (1, 2), (1, 1), (1, 3)]:
            solver = PoissonSolver(Grid((8, 8, 9)), ("PP", "PP", "NN"), "ccc", "ptdma", pencils, granularity="fused")
            b = da.zeros((8, 8, 9), chunks=home_chunks(solver))
            assert pm.task_count("ptdma", pencils, 8, "fused", 2) == len(build_graph(solver, b, client).tasks)
            chained = solver.solve(b)  # a fused solve's output: no ready markers
            assert pm.task_count("ptdma", pencils, 8, "fused", 2, inputs_may_fail=False) == len(
                build_graph(solver, chained, client).tasks)


def test_predictions_are_finite_and_add_up():
    for method in ("ftm", "ptdma"):
        for pencils in [(1, 1), (1, 4), (2, 2), (4, 1)]:
            for granularity in ("fused", "stage"):
                p = pm.predict_solve(method, (512, 2048, 512), pencils, 4, granularity=granularity)
                parts = p["compute_s"] + p["transfer_s"] + p["copy_s"] + p["latency_s"] + p["overhead_s"]
                assert math.isfinite(p["total_s"]) and p["total_s"] > 0 and p["total_s"] == pytest.approx(parts)
        s = pm.predict_step(method, (512, 1024, 144), (2, 2), 4)
        assert math.isfinite(s["total_s"]) and s["total_s"] > s["poisson_s"] > 0
    small = pm.predict_solve("ptdma", (512, 512, 512), (1, 1), 1, "float32")
    assert small["compute_s"] == pytest.approx(pm.predict_solve("ptdma", (512,) * 3, (1, 1), 1)["compute_s"] / 2)


def test_calibration_reproduces_the_preset():
    fitted = pm.calibrate()
    for name in ("hbm_bw", "solve_passes", "zsolve_passes", "substep_other_passes", "intra_pair_bw", "intra_a2a_bw",
                 "exchange_latency", "ns_exchange_latency", "solve_overhead", "stage_exchange_base",
                 "stage_exchange_per_source"):
        assert getattr(fitted, name) == pytest.approx(getattr(pm.H200_DASK, name), rel=0.05), name


def test_validation_against_the_measurements():
    rows = pm.validate()
    sources = {r["source"] for r in rows}
    assert {"poisson_single_H200.json", "poisson_distributed_4xH200.json", "transpose_4xH200.json",
            "channel_step_4xH200.json"} <= sources
    assert all(math.isfinite(r["ratio"]) and r["ratio"] > 0 for r in rows)
    s = pm.summary(rows)
    print(s)
    assert s["checked"] >= 50 and s["within_25_percent"] >= 0.75 * s["checked"]  # regression guard
    fused = [r["ratio"] for r in rows if "fused" in r["case"] and r["role"] == "check"]
    assert 0.8 < np.median(fused) < 1.1


def test_paper_predictions():
    pred = pm.paper_predictions()
    strong = {(tuple(s["pencils"]), s["method"]): s for s in pred["strong"]}
    for s in strong.values():
        assert all(math.isfinite(s[k]["total_s"]) for k in ("solve", "step", "solve_gpu", "step_gpu"))
        assert s["step"]["total_s"] >= s["step_gpu"]["total_s"]
    for pencils in ((512, 2), (8, 128)):  # P-TDMA never slower than FTM, and its reduced rows are cheap
        assert strong[pencils, "ptdma"]["solve"]["total_s"] < strong[pencils, "ftm"]["solve"]["total_s"]
    by = strong[(512, 2), "ptdma"]["solve"]["by_exchange"]
    assert list(by) == ["x->y", "all-rows", "y->x"]  # pz = 2: the boundary rows all-gathered in one round
    assert by["all-rows"] < 0.01 * strong[(512, 2), "ptdma"]["solve"]["total_s"]
    weak = {w["gpus"]: w for w in pred["weak"]}
    assert weak[1024]["ptdma"]["total_s"] < 1.1 * weak[128]["ptdma"]["total_s"]


def test_calibration_skips_superseded_step_measurements(tmp_path):
    """A measurement marked ``superseded_by`` (an older code's run of the same case) does not fit the
    step's exchange latency, whatever order the files come in."""
    import shutil

    results = pm.default_results_dir()
    for name in ("poisson_single_H200.json", "channel_step_H200.json"):
        shutil.copy(f"{results}/{name}", tmp_path / name)
    shutil.copy(f"{results}/channel_step_4xH200_pencils41.json", tmp_path / "a_current.json")
    shutil.copy(f"{results}/channel_step_4xH200.json", tmp_path / "b_older.json")
    fitted = pm.calibrate(str(tmp_path))
    assert fitted.ns_exchange_latency == pytest.approx(pm.H200_DASK.ns_exchange_latency, rel=0.05)
    older = json.loads((tmp_path / "b_older.json").read_text())
    del older["superseded_by"]
    (tmp_path / "b_older.json").write_text(json.dumps(older))
    assert pm.calibrate(str(tmp_path)).ns_exchange_latency > 1.5 * pm.H200_DASK.ns_exchange_latency
