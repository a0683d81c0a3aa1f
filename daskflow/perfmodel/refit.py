"""The H100 calibration: :data:`H100_NVLINK` re-derived from the 4 x H100 result files (NCCL
exchanges inside fused tasks), and the model against every H100 measurement it covers (see
:mod:`daskflow.perfmodel`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from daskflow.perfmodel.fit import load_results
from daskflow.perfmodel.model import H100_NVLINK, Machine, predict_solve, transpose_exchange
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
#: where each fitted parameter of H100_NVLINK comes from (name: (unit scale, unit, source))
PARAMETER_SOURCES = {
    "hbm_bw": (1e-12, "TB/s", "device copy of 512x256x144 float64 (fixed_layouts, call 2, padded_copy)"),
    "solve_passes": (1, "HBM passes", "one-GPU step breakdown, Poisson solve 0.98 ms (fixed_layouts, call 3)"),
    "zsolve_passes": (1, "HBM passes", "one-GPU step breakdown, one implicit z-solve 1.12 ms (call 3)"),
    "substep_other_passes": (1, "HBM passes", "one-GPU step 46.1 ms / 3 minus its solves (call 3)"),
    "intra_pair_bw": (1e-9, "GB/s", "NCCL floor, 2 GPUs, 1 GiB per GPU (transpose_4xH100_tcp_synced)"),
    "intra_a2a_bw": (1e-9, "GB/s", "NCCL floor, 4 GPUs, 1 GiB per GPU (transpose_4xH100_tcp_synced)"),
    "exchange_latency": (1e6, "µs", "NCCL link time of a 1 MiB exchange (exchange_latency_4xH100)"),
    "solve_overhead": (1e3, "ms", "1-GPU fused solve, chained minus floor (poisson_distributed_4xH100_weak_nccl)"),
    "host_step_floor": (1e3, "ms", "one-GPU step at 64x64x32 (channel_step_floor_4xH100)"),
    "host_round": (1e3, "ms", "(4-GPU (4, 1) step at 64x64x32 per GPU - the 1-GPU floor) / 17 rounds (same file)"),
    "host_distributed_solve": (1e3, "ms", "(1, 4) step 70.5 ms minus floor and 23 rounds, / 6 (fixed_layouts, call 3)"),
}
FIT_STEP = (3, "14_new")  # the step measurement (call, layout) that fits host_distributed_solve
OLDER_CALLS = (1,)  # calls of an older code (the bulk-velocity sum still read on the host every substep)


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


def _smallest(grids: dict) -> str:
    return min(grids, key=lambda k: np.prod([int(n) for n in k.split("x")]))


def _run(source, case, r, role) -> dict:
    pencils = tuple(r.get("pencils", (1, 1)))
    return {"source": source, "case": case, "shape": tuple(r["shape"]), "pencils": pencils,
            "gpus": r.get("gpus", 1), "seconds": r["seconds_per_step"], "role": role}


def _predict(run: dict, machine: Machine) -> dict:
    return predict_step("ptdma", run["shape"], run["pencils"], run["gpus"], machine=machine, steps_per_run=None)


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
        m = _fit_kernels(m, steps, one[0])
    m = _fit_links(m, results)
    floor = {r["gpus"]: r for r in runs if r["role"] == "fit" and r["source"] == FILES["floor"]}
    if 1 in floor:
        m = replace(m, host_step_floor=floor[1]["seconds"])
    if 4 in floor:
        rounds = _predict(floor[4], m)["exchanges"]
        m = replace(m, host_round=(floor[4]["seconds"] - m.host_step_floor) / rounds)
    fit = [r for r in runs if r["role"] == "fit" and r["gpus"] > 1 and r["source"] == FILES["steps"]]
    if fit:
        bare = _predict(fit[0], replace(m, host_distributed_solve=0.0))
        n = 6 if fit[0]["pencils"][1] > 1 else 0
        if n:
            m = replace(m, host_distributed_solve=max(0.0, (fit[0]["seconds"] - bare["host_s"]) / n))
    d = results.get(FILES["poisson"])
    if d:
        over = [r["chained_ms"] - r["floor_ms"] for r in d["results"] if r["gpus"] == 1]
        m = replace(m, solve_overhead=float(np.median(over)) * 1e-3)
    return m


def _fit_kernels(m: Machine, steps: dict, run: dict) -> Machine:
    """Kernel passes from the one-GPU step's per-substep breakdown (a GPU-bound step: its kernels
    take twice the host floor)."""
    call, key = run["case"].split()[1], run["case"].split()[2]
    r = next(c for c in steps["calls"] if str(c["call"]) == call)["channel_step_1gpu"][key]
    nbytes = int(np.prod(r["shape"])) * 8
    b = r["per_substep_breakdown_ms"]
    solve, z = b["poisson_solve_ms"] * 1e-3, b["implicit_solve_one_component_ms"] * 1e-3
    rest = r["seconds_per_step"] / 3 - solve - 3 * z
    return replace(m, solve_passes=solve * m.hbm_bw / nbytes, zsolve_passes=z * m.hbm_bw / nbytes,
                   substep_other_passes=rest * m.hbm_bw / nbytes)


def _fit_links(m: Machine, results: dict) -> Machine:
    """NCCL bandwidths from the NCCL floor of a 1 GiB x->y transpose (2 and 4 GPUs) and the GPU-side
    latency of an exchange from the NCCL link time of a 1 MiB one."""
    d = results.get(FILES["transpose"])
    for r in d["results"] if d else []:
        if r["mib_per_gpu"] == 1024 and "nccl_floor_ms" in r:
            bw = transpose_exchange(r["shape"], r["gpus"], 8, m).bytes_out / (r["nccl_floor_ms"] * 1e-3)
            m = replace(m, **{"intra_pair_bw" if r["gpus"] == 2 else "intra_a2a_bw": bw})
    d = results.get(FILES["latency"])
    for r in d["results"] if d else []:
        if r["comm"] == "nccl" and r["mib_per_worker"] == 1:
            m = replace(m, exchange_latency=r["nccl_link_ms"] * 1e-3)
    return m


def validate_h100(results_dir: str | None = None, machine: Machine = H100_NVLINK) -> list[dict]:
    """Prediction vs measurement for every H100 case the model covers (rows as :func:`validate`'s,
    plus ``bound``: which timeline, host or GPU, the model says sets the time)."""
    results = load_results(results_dir)
    rows = []

    def row(source, case, measured_s, predicted_s, role, bound=""):
        rows.append({"source": source, "case": case, "measured_ms": 1e3 * measured_s, "predicted_ms": 1e3 * predicted_s,
                     "ratio": predicted_s / measured_s, "role": role, "bound": bound})

    for r in step_runs(results):
        p = _predict(r, machine)
        case = f"{r['case']}: {r['gpus']} GPU {'x'.join(map(str, r['shape']))} {r['pencils']} step"
        row(r["source"], case, r["seconds"], p["total_s"], r["role"], p["bound"])
    for name in (FILES["transpose"], FILES["transpose_before"]):
        for r in results.get(name, {}).get("results", []):
            e = transpose_exchange(r["shape"], r["gpus"], 8, machine)
            case = f"{r['gpus']} GPU {r['mib_per_gpu']} MiB"
            fit = name == FILES["transpose"] and r["mib_per_gpu"] == 1024
            row(name, case + " NCCL floor", r["nccl_floor_ms"] * 1e-3, e.transfer_s, "fit" if fit else "check")
            gpu = e.transfer_s + e.copy_s + e.latency_s
            row(name, case + " direct NCCL chained", r["fused-nccl"]["chained_per_transpose_ms"] * 1e-3,
                max(gpu, machine.host_round), "check" if name == FILES["transpose"] else "superseded",
                "host" if machine.host_round > gpu else "gpu")
    d = results.get(FILES["poisson"])
    for r in d["results"] if d else []:
        p = predict_solve(r["method"], r["grid"], r["pencils"], r["gpus"], machine=machine)
        case = f"{r['gpus']} GPU {'x'.join(map(str, r['grid']))} {r['method']} fused {tuple(r['pencils'])} chained"
        row(FILES["poisson"], case, r["chained_ms"] * 1e-3, p["total_s"], "fit" if r["gpus"] == 1 else "check",
            "host" if p["host_s"] > p["gpu_s"] else "gpu")
    return rows
