"""Where a time step's GPU time goes, kernel by kernel: Nsight Compute's duration of every kernel of
one step, summed per (stage, kernel). Prints one JSON document with the device name.

    python benchmarks/kernel_breakdown.py --layouts 1 1 --layouts 2 1    # 510 x 256 x 144 per pencil

Each point runs one step under ``ncu`` (``--ncu``; clock and cache control off, the kernels timed
one at a time): the one-GPU step for pencils (1, 1), else rank 0 of the pencils with its peers
mirrored (:mod:`daskflow.pencils.mirror`, as ``pencil_floor.py`` runs it; even splits). The step
is not captured as a CUDA graph, so that NVTX ranges around the stage functions (the transforms,
z solves, cuts and assemblies of the pressure solve, the halo round's parts, the implicit solves,
the stepper's substeps) name the stage of every kernel; a kernel's time is its own, so the totals
compare the device work of the decompositions without their launch gaps, memory copies (the
mirror's stand-in for the wire) or transfers.
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import os
import re
import shutil
import subprocess
import sys

#: (module, label, functions) wrapped in NVTX ranges in the profiled step
STAGES = [
    ("daskflow.poisson.stages", "st", ["forward_x", "forward_y_owned", "backward_y_owned", "backward_x_owned",
                                       "forward_xy", "backward_xy_owned"]),
    ("daskflow.zsolve.spectral", "zs", ["thomas", "ptdma_reduce", "ptdma_reconstruct", "solve_gathered"]),
    ("daskflow.poisson.algorithms", "alg", ["cut_for_y_pencil", "cut_for_x_pencil", "cut_for_x_pencil_with_rows",
                                            "assemble_x", "assemble_y"]),
    ("daskflow.ns.operators", "ops", ["pad_with"]),
    ("daskflow.ns.halos", "halo", ["prepare", "fill_halos", "pieces"]),
    ("daskflow.zsolve.shared", "imp", ["solve_distributed"]),
    ("daskflow.pencils.packed:PackedTransport", "packed", ["post", "complete"]),
    ("daskflow.ns.domain:FlowDomain", "dom", ["solve_pressure", "solve_pressure_padded", "pad_many", "implicit_z"]),
    ("daskflow.ns.stepper:Stepper", "stepper", ["explicit_terms", "_project", "finish_step"]),
]


def _wrap_stages() -> None:
    """Every function of :data:`STAGES` inside an NVTX range named ``label.function``."""
    import importlib

    from cupy.cuda import nvtx

    for where, label, names in STAGES:
        module, _, cls = where.partition(":")
        owner = importlib.import_module(module)
        owner = getattr(owner, cls) if cls else owner
        for name in names:
            fn = getattr(owner, name)

            def ranged(*args, _fn=fn, _label=f"{label}.{name}", **kwargs):
                nvtx.RangePush(_label)
                try:
                    return _fn(*args, **kwargs)
                finally:
                    nvtx.RangePop()

            ranged.__dict__.update(getattr(fn, "__dict__", {}))  # a cut's ``local`` variant
            setattr(owner, name, ranged)


def one_step(shape: list[int], py: int, pz: int) -> None:
    """Warm up, then one step between ``cudaProfilerStart`` and ``Stop`` (the part ncu profiles)."""
    import cupy
    import dask
    from channel_step import _config
    from pencil_floor import mirrored_pencil

    from daskflow import Simulation
    from daskflow.ns import graphs

    _wrap_stages()
    config = _config([shape[0], shape[1] * py, shape[2] * pz], "z", (py, pz), cfl_every=10, dt=0.01)
    with dask.config.set({"daskflow.profile-phases": True}):  # uncaptured: the ranges see every launch
        if (py, pz) == (1, 1):
            sim = Simulation(config)

            def advance(n):
                sim.run(steps=n)
        else:
            _, _, stepper, _, advance = mirrored_pencil(config)
            # the transposes in slabs as the captured step of pencils of this size runs them
            stepper.domain.pipeline_pressure_transposes(graphs.transpose_slabs(stepper.domain))
        advance(3)
        cupy.cuda.Device().synchronize()
        cupy.cuda.profiler.start()
        advance(1)
        cupy.cuda.Device().synchronize()
        cupy.cuda.profiler.stop()


MS_PER = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}  # ms per unit


def summarise(lines: list[str]) -> dict:
    """ncu's raw CSV page (``--csv --page raw --nvtx``, metric ``gpu__time_duration.sum``) as
    ``{"total_ms", "kernels", "rows": [{"stage", "kernel", "calls", "ms"}]}``, the rows by time; a
    kernel's stage is the chain of NVTX ranges open at its launch."""
    rows = list(csv.reader(line for line in lines if line.startswith('"')))
    head, units, data = rows[0], rows[1], rows[2:]
    kernel, duration = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
    if units[duration] not in MS_PER:
        raise ValueError(f"kernel_breakdown: durations in {units[duration]!r}, expected one of {sorted(MS_PER)}")
    to_ms = MS_PER[units[duration]]
    ranges = next(i for i, h in enumerate(head) if "Push/Pop_Range" in h)
    ms, calls = collections.defaultdict(float), collections.Counter()
    for row in data:
        stack = re.findall(r'"<default domain>:([^:]+):', row[ranges])
        key = (" > ".join(stack) or "(outside the stages)", re.sub(r"[<(].*", "", row[kernel]).strip())
        ms[key] += float(row[duration].replace(",", "")) * to_ms
        calls[key] += 1
    ordered = sorted(ms.items(), key=lambda item: -item[1])
    return {"total_ms": sum(ms.values()), "kernels": sum(calls.values()),
            "rows": [{"stage": s, "kernel": k, "calls": calls[(s, k)], "ms": t} for (s, k), t in ordered]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", type=int, nargs=3, default=[510, 256, 144], help="points of one pencil")
    parser.add_argument("--layouts", type=int, nargs=2, action="append", metavar=("PY", "PZ"), required=True)
    parser.add_argument("--ncu", default=None, help="Nsight Compute's ncu (default: on the PATH)")
    parser.add_argument("--step", action="store_true", help=argparse.SUPPRESS)  # the profiled child
    args = parser.parse_args()
    if args.step:
        one_step(args.shape, *args.layouts[0])
        return
    ncu = args.ncu or shutil.which("ncu")
    if ncu is None:
        raise SystemExit("kernel_breakdown: Nsight Compute's ncu is not on the PATH (give --ncu)")
    import cupy

    from daskflow.backend import device_name

    here = os.path.dirname(os.path.abspath(__file__))
    points = []
    for py, pz in args.layouts:
        child = [sys.executable, os.path.join(here, "kernel_breakdown.py"), "--step", "--shape",
                 *map(str, args.shape), "--layouts", str(py), str(pz)]
        run = subprocess.run([ncu, "--profile-from-start", "off", "--nvtx", "--clock-control", "none",
                              "--cache-control", "none", "--metrics", "gpu__time_duration.sum", "--print-units", "base",
                              "--csv", "--page", "raw", *child], capture_output=True, text=True, cwd=here, check=True)
        points.append({"pencils": [py, pz], "shape": args.shape, **summarise(run.stdout.splitlines())})
        print(f"({py}, {pz}): {points[-1]['total_ms']:.3f} ms in {points[-1]['kernels']} kernels", file=sys.stderr)
    print(json.dumps({"benchmark": "kernel_breakdown", "device": device_name(cupy), "points": points}, indent=1))


if __name__ == "__main__":
    main()
