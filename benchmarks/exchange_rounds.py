"""Every exchange round of one time step, what it carries and how many bytes each participant sends.

Runs a channel in process with ``--pencils`` as a team of threads (the same domain code as the
cluster, :mod:`daskflow.pencils.team`), z-implicit diffusion, flow-rate forcing, P-TDMA, a store
with a scalars record every step, and records every exchange of one step (after a warm-up step):
the solve it belongs to, the stage that cut its pieces, and the bytes participant 0 sends to the
others (array data and the host values riding along). Prints one JSON object (device: the host CPU)
with the rounds and their totals, and the markdown table of ``docs/performance.md``.

    python benchmarks/exchange_rounds.py --shape 256 256 144 --pencils 2 2
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np

SOLVES = {"ns": "flow", "p": "pressure"}  # an executor's label -> the solve it serves
WHAT = {  # the stage that cut the pieces -> what the round carries
    "exchange.<locals>.<lambda>": "halo: faces, edges and corners of the velocity (and pressure)",
    "exchange.<locals>.cut_with_values": "halo plus host values (CFL maximum or bulk-velocity sum)",
    "solve_distributed.<locals>.<lambda>": "z-implicit: boundary rows of u, v, w (all-gather in the column group)",
    "cut_for_y_pencil": "pressure: x->y transpose (spectral x split)",
    "cut_for_x_pencil": "pressure: y->x transpose",
    "cut_all_boundary_rows": "pressure: P-TDMA boundary rows (all-gather in the column group)",
    "cut_boundary_rows": "pressure: P-TDMA boundary rows to the slice owners",
    "cut_solution_rows": "pressure: P-TDMA solved rows back",
    "cut_for_z_pencil": "pressure: y->z transpose (FTM)",
    "cut_for_y_from_z": "pressure: z->y transpose (FTM)",
    "FlowDomain.allreduce_many.<locals>.<lambda>": "reduction: every value of the record (and a stop flag)",
}


def _nbytes(piece) -> int:
    if isinstance(piece, dict):
        return sum(_nbytes(v) for v in piece.values())
    if isinstance(piece, (list, tuple)):
        return sum(_nbytes(v) for v in piece)
    if hasattr(piece, "nbytes"):
        return int(piece.nbytes)
    return 8 if isinstance(piece, (float, int)) else 0


def record_rounds(sim, steps: int = 1) -> list[dict]:
    """Run ``steps`` steps of in-process ``sim`` and return its exchanges, as participant 0 sees them."""
    from daskflow.pencils import executor

    rounds = []
    original = executor.DirectExecutor.exchange
    me = sim.stepper.domain.member.me

    def exchange(self, blocks, dests, sources, cut, join, extras=(), **options):
        if self.me == me:
            sent = 0
            for d in dests:
                if self.owner(d) != me:
                    sent += sum(_nbytes(cut(self.plan, s, blocks[s], d)) for s in sources(d) if s in blocks)
            name = getattr(cut, "__qualname__", str(cut))
            solve = SOLVES.get(self.run_id.split("/", 1)[1], "implicit (Helmholtz)")
            rounds.append({"solve": solve, "stage": name, "what": WHAT.get(name, name), "bytes_sent": sent})
        return original(self, blocks, dests, sources, cut, join, extras, **options)

    executor.DirectExecutor.exchange = exchange
    try:
        sim.run(steps=steps)
    finally:
        executor.DirectExecutor.exchange = original
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", type=int, nargs=3, default=[128, 128, 72])
    parser.add_argument("--pencils", type=int, nargs=2, default=[2, 2])
    args = parser.parse_args()

    from daskflow import Simulation

    with tempfile.TemporaryDirectory() as tmp:
        cfg = {"grid": {"shape": args.shape, "lengths": [4.0, 2.0, 2.0], "z_stretch": 1.8},
               "physics": {"nu": 1e-3, "forcing": {"kind": "flow_rate", "value": [0.6667, 0.0]}},
               "boundaries": {"preset": "channel"},
               "initial": {"kind": "turbulent_channel", "amplitude": 0.3, "seed": 1},
               "time": {"cfl": 0.5, "dt_max": 0.05, "implicit_diffusion": "z"},
               "solver": {"pencils": args.pencils, "poisson": "ptdma"},
               "output": {"store": str(Path(tmp) / "run.zarr"), "scalars_every": 1, "profiles_every": 0}}
        sim = Simulation(cfg).run(steps=1)
        rounds = record_rounds(sim)
    total = sum(r["bytes_sent"] for r in rounds)
    out = {"benchmark": "exchange_rounds", "device": platform.processor() or platform.machine(),
           "shape": args.shape, "pencils": args.pencils, "pencil_shape": [args.shape[0],
                                                                           args.shape[1] // args.pencils[0],
                                                                           args.shape[2] // args.pencils[1]],
           "rounds_per_step": len(rounds), "bytes_sent_per_step": total, "rounds": rounds}
    print(json.dumps(out))
    lines = ["| # | solve | what the round carries | bytes sent by one participant |", "|---|---|---|---|"]
    for i, r in enumerate(rounds, 1):
        lines.append(f"| {i} | {r['solve']} | {r['what']} | {r['bytes_sent']:,} |")
    lines.append(f"| | | **{len(rounds)} rounds** | **{total:,}** ({np.round(total / 2**20, 2)} MiB) |")
    print("\n".join(lines), file=sys.stderr)


if __name__ == "__main__":
    main()
