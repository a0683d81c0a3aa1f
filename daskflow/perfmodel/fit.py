"""Fitting the cost model to the committed 4 x H200 benchmark results (the H100 refit: :mod:`.refit`; the
seed paper's runs: :mod:`.paper`; see :mod:`daskflow.perfmodel`)."""

from __future__ import annotations

import glob
import json
import os
from dataclasses import replace

import numpy as np

from daskflow.perfmodel.model import (
    CHANNEL_BC,
    H200_DASK,
    Machine,
    passes_time,
    predict_solve,
    transpose_exchange,
)
from daskflow.perfmodel.step import predict_step

# ------------------------------------------------------------------------------------- measurements


def default_results_dir() -> str:
    """The committed benchmark results: ``docs/results`` of the checkout daskflow is imported from,
    or the copy installed with the package."""
    from daskflow import data

    return str(data.folder("results"))


def load_json(path: str):
    """A result file; text before the first ``{`` (warnings printed by the run) is skipped."""
    with open(path) as f:
        text = f.read()
    start = text.find("{")
    if start < 0:
        raise ValueError(f"{path}: no JSON object")
    return json.JSONDecoder().raw_decode(text[start:])[0]


def load_results(results_dir: str | None = None) -> dict:
    """``{file name: document}`` of every readable ``*.json`` in ``results_dir`` (default: the
    committed results); FileNotFoundError when that folder does not exist."""
    results_dir = results_dir or default_results_dir()
    if not os.path.isdir(results_dir):
        raise FileNotFoundError(f"{results_dir}: no benchmark results folder")
    out = {}
    for path in sorted(glob.glob(os.path.join(results_dir, "*.json"))):
        try:
            out[os.path.basename(path)] = load_json(path)
        except (ValueError, OSError):
            continue
    return out


MODEL_DEVICE = "NVIDIA H200"  # the hardware H200_DASK describes: results of other devices are not its data


def _of(results: dict, benchmark: str, gpus=None) -> list[tuple[str, dict]]:
    """The ``benchmark`` results measured on :data:`MODEL_DEVICE` (with ``gpus`` GPUs if given), but
    for those marked ``"model_data": false``: a later code's measurements on that device, which the
    fitted machine (the code up to 65d480e) does not describe."""
    return [(name, d) for name, d in results.items() if d.get("benchmark") == benchmark
            and d.get("device") == MODEL_DEVICE and (gpus is None or d.get("gpus", 1) == gpus)
            and d.get("model_data", True)]


def calibrate(results_dir: str | None = None, base: Machine = H200_DASK) -> Machine:
    """Re-derive the fitted parameters of ``H200_DASK`` from the result files (see its comments)."""
    results = load_results(results_dir)
    fields = {}
    for _, d in _of(results, "poisson_single"):
        for r in d["results"]:
            if r["n"] == 512 and r.get("dtype", "float64") == "float64":
                nbytes = r["points"] * 8
                fields["hbm_bw"] = 2 * nbytes / (r["copy_ms"] * 1e-3)
                fields["solve_passes"] = r["solve_ms"] * 1e-3 * fields["hbm_bw"] / nbytes
    m = replace(base, **fields)
    for _, d in _of(results, "channel_step"):
        if _step_fit(d) == "one GPU":
            pts = int(np.prod(d["shape"])) * 8
            z = d["per_substep_breakdown_ms"]["implicit_solve_one_component_ms"] * 1e-3
            solve = passes_time(int(np.prod(d["shape"])), 8, m.solve_passes, m)
            rest = d["seconds_per_step"] / 3 - solve - 3 * z
            m = replace(m, zsolve_passes=z * m.hbm_bw / pts, substep_other_passes=rest * m.hbm_bw / pts)
    raw = {}
    for _, d in _of(results, "transpose"):
        for r in d["results"]:
            if r["mib_per_gpu"] == 1024:
                e = transpose_exchange(r["shape"], r["gpus"], 8, m)
                raw.setdefault(r["gpus"], []).append(e.bytes_out / (r["raw_ms"] * 1e-3))
    if 2 in raw:
        m = replace(m, intra_pair_bw=float(np.median(raw[2])))
    if 4 in raw:
        m = replace(m, intra_a2a_bw=float(np.median(raw[4])))
    direct, stage = [], []
    for name, d in _of(results, "transpose"):
        for r in d["results"]:
            e = transpose_exchange(r["shape"], r["gpus"], 8, m)
            data = e.transfer_s + e.copy_s
            stage.append((r["gpus"], r["stage"]["chained_per_transpose_ms"] * 1e-3 - data))
            if "run1" not in name and r["gpus"] == 4:
                direct.append(r["fused"]["chained_per_transpose_ms"] * 1e-3 - data)
    if direct:
        m = replace(m, exchange_latency=float(np.mean(direct)))
    if len({g for g, _ in stage}) > 1:
        x = np.array([[1.0, g] for g, _ in stage])
        (b0, b1), *_ = np.linalg.lstsq(x, np.array([t for _, t in stage]), rcond=None)
        m = replace(m, stage_exchange_base=float(b0), stage_exchange_per_source=float(b1))
    over = [r["chained_ms"] - r["floor_ms"] for _, d in _of(results, "poisson_distributed")
            for r in d["results"] if r["gpus"] == 1]
    if over:
        m = replace(m, solve_overhead=float(np.median(over)) * 1e-3)
    for _, d in _of(results, "channel_step"):
        if _step_fit(d) == "y-slabs":
            bare = replace(m, ns_exchange_latency=0.0, exchange_latency=0.0)
            probe = predict_step("ptdma", d["shape"], d["pencils"], d["gpus"], machine=bare)
            m = replace(m, ns_exchange_latency=(d["seconds_per_step"] - probe["total_s"]) / probe["exchanges"])
    return m


def validate(results_dir: str | None = None, machine: Machine = H200_DASK) -> list[dict]:
    """Prediction vs measurement for every case in the result files the model covers.

    ``role`` says whether the measurement fitted a parameter (``fit``) or is predicted (``check``);
    ``superseded`` marks an older code's measurement of a case measured again since.
    """
    results = load_results(results_dir)
    rows = []

    def row(source, case, measured_s, predicted_s, role):
        rows.append({"source": source, "case": case, "measured_ms": 1e3 * measured_s, "predicted_ms": 1e3 * predicted_s,
                     "ratio": predicted_s / measured_s, "role": role})

    for name, d in _of(results, "poisson_single"):
        for r in d["results"]:
            p = predict_solve("ptdma", [r["n"]] * 3, (1, 1), 1, r.get("dtype", "float64"), machine)
            role = "fit" if r["n"] == 512 else "check"
            row(name, f"{r['n']}^3 in process", r["solve_ms"] * 1e-3, p["compute_s"], role)
    for name, d in _of(results, "poisson_distributed"):
        for r in d["results"]:
            dtype = d.get("config", {}).get("dtype", "float64")
            p = predict_solve(r["method"], r["grid"], r["pencils"], r["gpus"], dtype, machine, r["granularity"],
                              tuple(d.get("bc", CHANNEL_BC)))
            grid = "x".join(map(str, r["grid"]))
            case = f"{r['gpus']} GPU {grid} {r['method']} {r['granularity']} {tuple(r['pencils'])}"
            role = "fit" if r["gpus"] == 1 else "check"
            row(name, case + " chained", r["chained_ms"] * 1e-3, p["total_s"], role)
    for name, d in _of(results, "transpose"):
        for r in d["results"]:
            e = transpose_exchange(r["shape"], r["gpus"], 8, machine)
            case = f"{r['gpus']} GPU {r['mib_per_gpu']} MiB"
            role = "fit" if r["mib_per_gpu"] == 1024 else "check"
            row(name, case + " raw links", r["raw_ms"] * 1e-3, e.transfer_s, role)
            direct = e.transfer_s + e.copy_s + machine.exchange_latency
            row(name, case + " direct chained", r["fused"]["chained_per_transpose_ms"] * 1e-3, direct,
                "check" if "run1" in name else "fit")
            staged = (e.transfer_s + e.copy_s + machine.stage_exchange_base
                      + machine.stage_exchange_per_source * r["gpus"])
            row(name, case + " task per piece chained", r["stage"]["chained_per_transpose_ms"] * 1e-3, staged, "fit")
    for name, d in _of(results, "channel_step"):
        if d.get("device") != "NVIDIA H200":
            continue
        gpus = d.get("gpus", 1)
        p = predict_step("ptdma", d["shape"], d["pencils"], gpus, machine=machine,
                         steps_per_run=10 if gpus > 1 else None)
        row(name, f"{gpus} GPU {'x'.join(map(str, d['shape']))} {tuple(d['pencils'])} step", d["seconds_per_step"],
            p["total_s"], _step_role(d))
    return rows


def _step_fit(d: dict) -> str | None:
    """Which step parameters a ``channel_step`` measurement fits in :func:`calibrate`: ``"one GPU"``
    (an H200 on the seed's 512 x 256 x 144 grid: the local passes), ``"y-slabs"`` (several H200s,
    pencils (n, 1): the exchange latency inside a step) or ``None`` (a check, or an older code's run
    of a case measured again since, marked ``superseded_by``)."""
    if d.get("device") != "NVIDIA H200" or "superseded_by" in d:
        return None
    if d.get("gpus", 1) == 1:
        return "one GPU" if list(d["shape"]) == [512, 256, 144] and "per_substep_breakdown_ms" in d else None
    return "y-slabs" if d["pencils"][1] == 1 else None


def _step_role(d: dict) -> str:
    """The role of a ``channel_step`` row: ``fit`` where :func:`_step_fit` says so, ``superseded``
    for an older code's run of a remeasured case, ``check`` for every other (a prediction)."""
    if "superseded_by" in d:
        return "superseded"
    return "fit" if _step_fit(d) else "check"


def summary(rows: list[dict]) -> dict:
    """Counts of checked cases within 25 % and the spread of their ratios."""
    checks = [r["ratio"] for r in rows if r["role"] == "check"]
    within = [x for x in checks if 0.75 <= x <= 1.25]
    return {"checked": len(checks), "within_25_percent": len(within),
            "median_ratio": float(np.median(checks)) if checks else float("nan"),
            "min_ratio": min(checks, default=float("nan")), "max_ratio": max(checks, default=float("nan"))}


