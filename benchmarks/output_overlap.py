"""Seconds per step of a one-pencil run that writes its store often, with the writes on the store's
own thread (``daskflow.output-thread``, the default) and with the loop waiting for each write,
alternating in one process. Prints one JSON document with the device name.

    python benchmarks/output_overlap.py --device cpu --shape 128 64 64 --every 5
    python benchmarks/output_overlap.py --device gpu --shape 48 32 32 --every 100 --steps 400
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import dask
import yaml
from cpu_channel import cpu_model

from daskflow import Simulation
from daskflow.backend import cupy_or_none, device_name

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "channel-small.yaml"


def _config(shape, every: int, store: str, device: str) -> dict:
    cfg = yaml.safe_load(EXAMPLE.read_text())
    cfg["grid"]["shape"] = list(shape)
    cfg["output"].update(store=store, scalars_every=1, profiles_every=every, fields_every=every,
                         checkpoint_every=every)
    cfg["solver"].update(device=device, pencils=[1, 1])
    return cfg


def seconds_per_step(cfg: dict, steps: int, thread: bool) -> float:
    """One run from a fresh store: ``steps`` steps timed after two untimed ones (device synchronised)."""
    shutil.rmtree(cfg["output"]["store"], ignore_errors=True)
    with dask.config.set({"daskflow.output-thread": thread}):
        sim = Simulation(cfg)
        sim.run(steps=2)
        start = time.perf_counter()
        sim.run(steps=steps)  # returns once every write of the segment is done
        return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=int, nargs=3, default=[128, 64, 64])
    parser.add_argument("--every", type=int, default=5, help="steps between snapshots, profiles and checkpoints")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per run (default 4 x --every)")
    parser.add_argument("--rounds", type=int, default=2, help="runs per mode, alternating")
    parser.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    args = parser.parse_args()
    steps = args.steps or 4 * args.every
    with tempfile.TemporaryDirectory() as directory:
        cfg = _config(args.shape, args.every, str(Path(directory) / "run.zarr"), args.device)
        runs = {"thread": [], "waiting": []}
        for _ in range(args.rounds):
            for mode in runs:
                runs[mode].append(seconds_per_step(cfg, steps, mode == "thread"))
    median = {mode: statistics.median(values) for mode, values in runs.items()}
    device = cpu_model() if args.device == "cpu" else device_name(cupy_or_none())
    print(json.dumps({"benchmark": "output_overlap", "device": device, "shape": args.shape,
                      "output_every": args.every, "steps": steps,
                      "seconds_per_step": {mode: [round(v, 5) for v in values] for mode, values in runs.items()},
                      "median_seconds_per_step": median,
                      "thread_over_waiting": median["thread"] / median["waiting"]}, indent=1))


if __name__ == "__main__":
    main()
