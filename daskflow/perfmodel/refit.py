"""The calibrations of the NCCL machines: :data:`H100_NVLINK` re-derived from the 4 x H100 result files
and :data:`H200_NCCL` from the newest 4 x H200 ones (NCCL exchanges inside fused tasks, Dask over
TCP), and the model against every measurement of each that it covers (see :mod:`daskflow.perfmodel`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from daskflow.perfmodel.fit import load_results
from daskflow.perfmodel.model import H100_NVLINK, H200_NCCL, Machine, predict_solve, transpose_exchange
from daskflow.perfmodel.step import predict_step

H100_DEVICE = "NVIDIA H100 80GB HBM3"
FILES = {  # what each H100 file holds
    "steps": "channel_step_4xH100_fixed_layouts.json",  # 1 and 4 GPU steps, three calls
    "floor": "channel_step_floor_4xH100.json",  # the step on small grids: the host floor
    "transpose": "transpose_4xH100_tcp_synced.json",  # chained x->y transposes and the NCCL floor
    "transpose_before": "transpose_4xH100_tcp_synced_ec52acb.json",  # the same before the fixed layouts
    "latency": "exchange_latency_4xH100.json",  # NCCL link time of small exchanges
    "poisson": "poisson_distributed_4xH100_weak_nccl.json",  # fused Poisson solves, 1 and 4 GPUs
}
#: the unit each fitted parameter is shown in: (scale from SI, unit)
UNITS = {"hbm_bw": (1e-12, "TB/s"), "solve_passes": (1, "HBM passes"), "zsolve_passes": (1, "HBM passes"),
         "substep_other_passes": (1, "HBM passes"), "intra_pair_bw": (1e-9, "GB/s"), "intra_a2a_bw": (1e-9, "GB/s"),
         "exchange_latency": (1e6, "µs"), "solve_overhead": (1e3, "ms"), "host_step_floor": (1e3, "ms"),
         "host_round": (1e3, "ms"), "host_distributed_solve": (1e3, "ms"), "gpu_distributed_solve": (1e3, "ms")}


def _with_units(sources: dict) -> dict:
    """``{name: (unit scale, unit, source)}`` of ``{name: source}``."""
    return {name: (*UNITS[name], source) for name, source in sources.items()}


#: where each fitted parameter of H100_NVLINK comes from (name: (unit scale, unit, source))
PARAMETER_SOURCES = _with_units({
    "hbm_bw": "device copy of 512x256x144 float64 (fixed_layouts, call 2, padded_copy)",
    "solve_passes": "one-GPU step breakdown, Poisson solve 0.98 ms (fixed_layouts, call 3)",
    "zsolve_passes": "one-GPU step breakdown, one implicit z-solve 1.12 ms (call 3)",
    "substep_other_passes": "one-GPU step 46.1 ms / 3 minus its solves (call 3)",
    "intra_pair_bw": "NCCL floor, 2 GPUs, 1 GiB per GPU (transpose_4xH100_tcp_synced)",
    "intra_a2a_bw": "NCCL floor, 4 GPUs, 1 GiB per GPU (transpose_4xH100_tcp_synced)",
    "exchange_latency": "NCCL link time of a 1 MiB exchange (exchange_latency_4xH100)",
    "solve_overhead": "1-GPU fused solve, chained minus floor (poisson_distributed_4xH100_weak_nccl)",
    "host_step_floor": "one-GPU step at 64x64x32 (channel_step_floor_4xH100)",
    "host_round": "(4-GPU (4, 1) step at 64x64x32 per GPU - the 1-GPU floor) / 17 rounds (same file)",
    "host_distributed_solve": "(1, 4) step 70.5 ms minus floor and 23 rounds, / 6 (fixed_layouts, call 3)",
})
FIT_STEP = (3, "14_new")  # the step measurement (call, layout) that fits host_distributed_solve
OLDER_CALLS = (1,)  # calls of an older code (the bulk-velocity sum still read on the host every substep)

H200_FILES = {  # what each H200 file holds (the code at c24df85 and its neighbours)
    "steps": "channel_step_4xH200_control_interval.json",  # 1, 2 and 4 GPU steps, one call
    "floor": "channel_step_floor_4xH200.json",  # the step on small grids: the host floor
    "transpose": "transpose_4xH200_nccl.json",  # chained x->y transposes and the NCCL floor
    "p2p": "nccl_p2p_settings_2xH200.json",  # NCCL point to point of 72 and 1.8 MiB
    "poisson": "poisson_distributed_4xH200_weak_nccl.json",  # fused Poisson solves, 1 and 4 GPUs
    # steps replayed from CUDA graphs (5d7dda3, its second call): the GPU's timeline alone
    "captured": "channel_step_graphs_4xH200_step_slabs.json",
}
CAPTURED_CALL = 1  # the call of the "captured" file that measured the default code
CAPTURED_FIT = (2, 2)  # the captured step that fixes gpu_distributed_solve
#: where each fitted parameter of H200_NCCL comes from (name: (unit scale, unit, source))
H200_PARAMETER_SOURCES = _with_units({
    "hbm_bw": "device copy of 512^3 float64 (poisson_single_H200)",
    "solve_passes": "one-GPU step breakdown, Poisson solve 0.68 ms (control_interval, one GPU)",
    "zsolve_passes": "one-GPU step breakdown, one implicit z-solve 0.24 ms (same run)",
    "substep_other_passes": "one-GPU step 16.95 ms (steady) / 3 minus its solves (same run)",
    "intra_pair_bw": "NCCL floor, 2 GPUs, 1 GiB per GPU (transpose_4xH200_nccl)",
    "intra_a2a_bw": "NCCL floor, 4 GPUs, 1 GiB per GPU (transpose_4xH200_nccl)",
    "exchange_latency": "NCCL point to point of 1.8 MiB minus its bytes (nccl_p2p_settings_2xH200)",
    "solve_overhead": "1-GPU fused solve, chained minus floor (poisson_distributed_4xH200_weak_nccl)",
    "host_step_floor": "one-GPU step at 64x64x32, CUDA graphs off, steady (channel_step_floor_4xH200)",
    "host_round": "(4-GPU (4, 1) step at 64x64x32 per GPU - the 1-GPU floor) / 14 rounds (same file)",
    "gpu_distributed_solve": "(4-GPU (2, 2) step replayed from a CUDA graph, steady, - its GPU timeline without "
                             "them) / 6 per step (channel_step_graphs_4xH200_step_slabs, second call)",
})


def step_runs(results: dict) -> list[dict]:
    """Every measured step of the H100 files: ``source, case, shape, pencils, gpus, seconds, role``.
    Roles: ``fit`` (fixes a parameter of :func:`calibrate_h100`), ``check`` (a prediction) or
    ``superseded`` (a baseline or an older code's run)."""
    out = []
    d = results.get(FILES["steps"])
    if d:
        ones = [(c["call"], k, r) for c in d["calls"] for k, r in c.get("channel_step_1gpu", {}).items()]
        latest = max(c for c, _, _ in ones) if ones else None
        for call, key, r in ones:
            role = "fit" if (call, key) == (latest, "step1_new") else "check"
            out.append(_run(FILES["steps"], f"call {call} {key}", r, role))
        for c in d["calls"]:
            for key, runs in c.get("channel_step_4gpu", {}).items():
                for r in runs:
                    older = key.endswith("_base") or c["call"] in OLDER_CALLS
                    role = "fit" if (c["call"], key) == FIT_STEP else "superseded" if older else "check"
                    out.append(_run(FILES["steps"], f"call {c['call']} {key}", r, role))
    d = results.get(FILES["floor"])
    if d:
        for key, r in d["one_gpu"].items():
            out.append(_run(FILES["floor"], f"floor {key}", r, "fit" if key == _smallest(d["one_gpu"]) else "check"))
        for key, runs in d["four_gpus_4x1"].items():
            for r in runs:
                role = "fit" if key == _smallest(d["four_gpus_4x1"]) else "check"
                out.append(_run(FILES["floor"], f"floor {key} per GPU", r, role))
    return out


def step_runs_h200(results: dict) -> list[dict]:
    """Every measured step of the H200 files, as :func:`step_runs`'s rows, each at its steady time
    (the model's ``steps_per_run=None``): the one-GPU step and the floors ``fit``, the 2- and 4-GPU
    steps ``check``, the baseline's ``superseded``."""
    out = []
    d = results.get(H200_FILES["steps"])
    if d:
        out.append(_run(H200_FILES["steps"], "one_new", d["one_new"], "fit", steady=True))
        for key in ("two_new", "two_new_again", "four_new", "two_base"):
            for r in d.get(key, []):
                role = "superseded" if key.endswith("_base") else "check"
                out.append(_run(H200_FILES["steps"], key, r, role, steady=True))
    d = results.get(H200_FILES["floor"])
    if d:
        out += [_run(H200_FILES["floor"], f"floor {key}", r, "fit", steady=True) for key, r in d["one_gpu"].items()]
        out += [_run(H200_FILES["floor"], f"floor {key} per GPU", r, "fit", steady=True)
                for key, runs in d["four_gpus_4x1"].items() for r in runs]
    d = results.get(H200_FILES["captured"])
    if d:
        call = d["calls"][CAPTURED_CALL]
        out.append(_run(H200_FILES["captured"], "captured one", call["one"], "check", steady=True))
        for key in ("two", "four"):
            for r in call[key]:
                role = "fit" if tuple(r["pencils"]) == CAPTURED_FIT else "check"
                out.append(_run(H200_FILES["captured"], f"captured {key}", r, role, steady=True, captured=True))
    return out


def _smallest(grids: dict) -> str:
    return min(grids, key=lambda k: np.prod([int(n) for n in k.split("x")]))


def _run(source, case, r, role, steady: bool = False, captured: bool = False) -> dict:
    """A measured step as a row; ``captured``: its steps replayed from CUDA graphs."""
    pencils = tuple(r.get("pencils") or (1, 1))
    seconds = r.get("seconds_per_step_steady") if steady else None
    return {"source": source, "case": case, "shape": tuple(r["shape"]), "pencils": pencils,
            "gpus": r.get("gpus") or 1, "seconds": seconds or r["seconds_per_step"], "role": role, "captured": captured}


def _predict(run: dict, machine: Machine) -> dict:
    return predict_step("ptdma", run["shape"], run["pencils"], run["gpus"], machine=machine, steps_per_run=None,
                        captured=run.get("captured", False))


def calibrate_h100(results_dir: str | None = None, base: Machine = H100_NVLINK) -> Machine:
    """Re-derive the fitted parameters of ``H100_NVLINK`` from the H100 result files (see its
    comments); a parameter whose file is missing keeps ``base``'s value."""
    results = load_results(results_dir)
    m = base
    steps = results.get(FILES["steps"], {"calls": []})
    for call in steps["calls"]:
        if "padded_copy" in call:
            pc = call["padded_copy"]
            m = replace(m, hbm_bw=2 * int(np.prod(pc["shape"])) * 8 / (pc["plain_copy_ms"] * 1e-3))
    runs = step_runs(results)
    one = [r for r in runs if r["role"] == "fit" and r["gpus"] == 1 and r["source"] == FILES["steps"]]
    if one:
        call, key = one[0]["case"].split()[1], one[0]["case"].split()[2]
        r = next(c for c in steps["calls"] if str(c["call"]) == call)["channel_step_1gpu"][key]
        m = _fit_kernels(m, r, r["seconds_per_step"])
    m = _fit_links(m, results, FILES["transpose"])
    d = results.get(FILES["latency"])
    for r in d["results"] if d else []:
        if r["comm"] == "nccl" and r["mib_per_worker"] == 1:
            m = replace(m, exchange_latency=r["nccl_link_ms"] * 1e-3)
    m = _fit_host(m, [r for r in runs if r["role"] == "fit" and r["source"] == FILES["floor"]])
    fit = [r for r in runs if r["role"] == "fit" and r["gpus"] > 1 and r["source"] == FILES["steps"]]
    if fit:
        bare = _predict(fit[0], replace(m, host_distributed_solve=0.0))
        n = 6 if fit[0]["pencils"][1] > 1 else 0
        if n:
            m = replace(m, host_distributed_solve=max(0.0, (fit[0]["seconds"] - bare["host_s"]) / n))
    return _fit_solve_overhead(m, results.get(FILES["poisson"]))


def calibrate_h200(results_dir: str | None = None, base: Machine = H200_NCCL) -> Machine:
    """Re-derive the fitted parameters of ``H200_NCCL`` from the H200 result files
    (:data:`H200_FILES`, :data:`H200_PARAMETER_SOURCES`); a parameter whose file is missing keeps
    ``base``'s value."""
    results = load_results(results_dir)
    m = base
    for r in results.get("poisson_single_H200.json", {}).get("results", []) or []:
        if r["n"] == 512 and r.get("dtype", "float64") == "float64":
            m = replace(m, hbm_bw=2 * r["points"] * 8 / (r["copy_ms"] * 1e-3))
    steps = results.get(H200_FILES["steps"])
    if steps:
        m = _fit_kernels(m, steps["one_new"], steps["one_new"]["seconds_per_step_steady"])
    m = _fit_links(m, results, H200_FILES["transpose"])
    d = results.get(H200_FILES["p2p"])
    small = [r for r in d["rows"] if set(r["settings"]) <= {"NCCL_VERSION"}] if d else []
    if small:
        r = min(small, key=lambda r: r["mib_to_each_peer"])
        m = replace(m, exchange_latency=r["ms"] * 1e-3 - r["mib_to_each_peer"] * 2 ** 20 / m.intra_pair_bw)
    runs = step_runs_h200(results)
    m = _fit_host(m, [r for r in runs if r["source"] == H200_FILES["floor"]])
    fit = [r for r in runs if r["source"] == H200_FILES["captured"] and r["role"] == "fit"]
    if fit:
        bare = _predict(fit[0], replace(m, gpu_distributed_solve=0.0))
        m = replace(m, gpu_distributed_solve=(fit[0]["seconds"] - bare["gpu_s"]) / bare["distributed_solves"])
    return _fit_solve_overhead(m, results.get(H200_FILES["poisson"]))


def _fit_kernels(m: Machine, run: dict, seconds: float) -> Machine:
    """Kernel passes from a one-GPU step's per-substep breakdown (``run``, a channel_step row) and its
    time per step (a GPU-bound step: its kernels take longer than the host floor)."""
    nbytes = int(np.prod(run["shape"])) * 8
    b = run["per_substep_breakdown_ms"]
    solve, z = b["poisson_solve_ms"] * 1e-3, b["implicit_solve_one_component_ms"] * 1e-3
    rest = seconds / 3 - solve - 3 * z
    return replace(m, solve_passes=solve * m.hbm_bw / nbytes, zsolve_passes=z * m.hbm_bw / nbytes,
                   substep_other_passes=rest * m.hbm_bw / nbytes)


def _fit_links(m: Machine, results: dict, transpose: str) -> Machine:
    """NCCL bandwidths from the NCCL floor of a 1 GiB x->y transpose (2 and 4 GPUs, file ``transpose``)."""
    d = results.get(transpose)
    for r in d["results"] if d else []:
        if r["mib_per_gpu"] == 1024 and "nccl_floor_ms" in r:
            bw = transpose_exchange(r["shape"], r["gpus"], 8, m).bytes_out / (r["nccl_floor_ms"] * 1e-3)
            m = replace(m, **{"intra_pair_bw" if r["gpus"] == 2 else "intra_a2a_bw": bw})
    return m


def _fit_host(m: Machine, floors: list[dict]) -> Machine:
    """The host floor from the smallest one-GPU step of ``floors`` (steps too small to keep a GPU busy)
    and the host's cost per round from the smallest four-GPU one."""
    by_gpus = {}
    for r in sorted(floors, key=lambda r: np.prod(r["shape"])):
        by_gpus.setdefault(r["gpus"], r)
    if 1 in by_gpus:
        m = replace(m, host_step_floor=by_gpus[1]["seconds"])
    if 4 in by_gpus:
        rounds = _predict(by_gpus[4], m)["exchanges"]
        m = replace(m, host_round=(by_gpus[4]["seconds"] - m.host_step_floor) / rounds)
    return m


def _fit_solve_overhead(m: Machine, d: dict | None) -> Machine:
    """Dask's cost of a submitted fused solve: the one-GPU solves' chained time minus their floor."""
    if not d:
        return m
    over = [r["chained_ms"] - r["floor_ms"] for r in d["results"] if r["gpus"] == 1]
    return replace(m, solve_overhead=float(np.median(over)) * 1e-3)


def validate_h100(results_dir: str | None = None, machine: Machine = H100_NVLINK) -> list[dict]:
    """Prediction vs measurement for every H100 case the model covers (rows as :func:`validate`'s,
    plus ``bound``: which timeline, host or GPU, the model says sets the time)."""
    results = load_results(results_dir)
    return _validate(results, machine, step_runs(results), {FILES["transpose"]: "check", FILES["transpose_before"]:
                                                            "superseded"}, "chained_per_transpose_ms", FILES["poisson"])


def validate_h200(results_dir: str | None = None, machine: Machine = H200_NCCL) -> list[dict]:
    """:func:`validate_h100` for the H200 files (:data:`H200_FILES`); a transpose is its steady time
    inside a chain (the run's fixed cost out), as the steps are."""
    results = load_results(results_dir)
    return _validate(results, machine, step_runs_h200(results), {H200_FILES["transpose"]: "check"},
                     "steady_per_transpose_ms", H200_FILES["poisson"])


def _validate(results: dict, machine: Machine, runs: list[dict], transposes: dict, transpose_key: str,
              poisson: str) -> list[dict]:
    rows = []

    def row(source, case, measured_s, predicted_s, role, bound=""):
        rows.append({"source": source, "case": case, "measured_ms": 1e3 * measured_s, "predicted_ms": 1e3 * predicted_s,
                     "ratio": predicted_s / measured_s, "role": role, "bound": bound})

    for r in runs:
        p = _predict(r, machine)
        case = f"{r['case']}: {r['gpus']} GPU {'x'.join(map(str, r['shape']))} {r['pencils']} step"
        row(r["source"], case, r["seconds"], p["total_s"], r["role"], p["bound"])
    for name, role in transposes.items():
        for r in results.get(name, {}).get("results", []):
            e = transpose_exchange(r["shape"], r["gpus"], 8, machine)
            case = f"{r['gpus']} GPU {r['mib_per_gpu']} MiB"
            fit = role == "check" and r["mib_per_gpu"] == 1024
            row(name, case + " NCCL floor", r["nccl_floor_ms"] * 1e-3, e.transfer_s, "fit" if fit else "check")
            gpu = e.transfer_s + e.copy_s + e.latency_s
            row(name, case + " direct NCCL " + transpose_key.split("_")[0], r["fused-nccl"][transpose_key] * 1e-3,
                max(gpu, machine.host_round), role, "host" if machine.host_round > gpu else "gpu")
    d = results.get(poisson)
    for r in d["results"] if d else []:
        p = predict_solve(r["method"], r["grid"], r["pencils"], r["gpus"], machine=machine)
        case = f"{r['gpus']} GPU {'x'.join(map(str, r['grid']))} {r['method']} fused {tuple(r['pencils'])} chained"
        row(poisson, case, r["chained_ms"] * 1e-3, p["total_s"], "fit" if r["gpus"] == 1 else "check",
            "host" if p["host_s"] > p["gpu_s"] else "gpu")
    return rows
