"""Roofline account of the one-device channel step: every operation of a substep, the bytes it must
move and the time it takes, against the copy bandwidth measured in the same process.

    python benchmarks/roofline.py [--shape 512 256 144] [--steps 5] [--implicit z] [--device gpu]

The operations are the stepper's own calls, wrapped for the timed steps: the halo paddings, the
explicit terms, the RK updates (with the implicit right-hand sides' second differences), the
implicit and pressure solves, the divergence, the pressure update, the CFL rate and the flow-rate
sum. An operation *must move*
each array it reads once and each array it writes once (an in-place operand counts as read and
written); what a solver moves beyond that (a spectrum's passes, its work arrays) is its own cost
above the roofline. On the GPU each operation is timed by CUDA events from the queueing of its
first kernel to the end of its last, gaps where the host queues late included, and nothing is
synchronised inside the step; on the CPU by the wall clock. What the wrapped operations do not
cover (elementwise additions of the stepper, wall faces, the forcing) is reported as
``unattributed``.

The whole step's fraction of the roofline is the sum of the bytes its operations must move over
the copy bandwidth, divided by the step time measured without the wrappers. Prints one JSON
document with the device name.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import time

import numpy as np

#: operations wrapped on the domain, on the stepper and in the operators module (calls nested in
#: one of them are part of it)
DOMAIN_OPERATIONS = ("pad_velocity", "pad_and_reduce", "pad", "solve_pressure", "implicit_z", "implicit_xyz")
STEPPER_OPERATIONS = ("explicit_terms", "local_rate")
OPERATOR_FUNCTIONS = ("update", "laplacian", "divergence", "pressure_update")
#: what an operator reads where its arguments say more: without implicit axes the pressure update
#: is ``p + phi`` and reads nothing of the padded ``Phi``
OPERATOR_READS = {"pressure_update": lambda p, phi, Phi, m, axes, scale: [p, phi, Phi] if axes else [p, phi]}


def array_bytes(obj, seen: set | None = None) -> int:
    """Bytes of every distinct array in ``obj`` (an array, or lists, tuples and dicts of them; other
    values count nothing); an array met twice (the same data and size) counts once."""
    seen = set() if seen is None else seen
    if isinstance(obj, dict):
        return sum(array_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(array_bytes(v, seen) for v in obj)
    nbytes = getattr(obj, "nbytes", None)
    if nbytes is None or getattr(obj, "ndim", 0) == 0:
        return 0
    data = obj.data.ptr if hasattr(obj.data, "ptr") else obj.__array_interface__["data"][0]
    key = (data, nbytes)
    if key in seen:
        return 0
    seen.add(key)
    return int(nbytes)


class Ledger:
    """Timed operations: ``(name, start, stop, bytes)`` per call, start and stop CUDA events (GPU)
    or wall-clock seconds (CPU). Only the outermost wrapped call of a nesting is recorded."""

    def __init__(self, xp) -> None:
        self.xp = xp
        self.records: list = []
        self._depth = 0

    def mark(self):
        """Now: a recorded CUDA event on the GPU, the wall clock in seconds on the CPU."""
        if self.xp is np:
            return time.perf_counter()
        event = self.xp.cuda.Event()
        event.record()
        return event

    def wrap(self, name: str, fn, reads=None):
        """``fn`` recording its calls as ``name``; ``reads(*args)`` gives the arrays it reads where its
        arguments do not hold them as arrays (the CFL rate reads the state's velocity)."""
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            if self._depth:
                return fn(*args, **kwargs)
            self._depth += 1
            try:
                start = self.mark()
                result = fn(*args, **kwargs)
                stop = self.mark()
            finally:
                self._depth -= 1
            inputs = (args, kwargs) if reads is None else reads(*args)
            self.records.append((name, start, stop, array_bytes(inputs) + array_bytes(result)))
            return result

        return timed

    def seconds(self, start, stop) -> float:
        if self.xp is np:
            return stop - start
        stop.synchronize()
        return self.xp.cuda.get_elapsed_time(start, stop) * 1e-3


@contextlib.contextmanager
def wrapped(sim, ledger: Ledger):
    """``sim``'s stepper with its operations recorded in ``ledger`` for the duration."""
    from daskflow.ns import operators as ops

    stepper = sim.stepper
    domain = stepper.domain
    saved = [(ops, name, getattr(ops, name)) for name in OPERATOR_FUNCTIONS]
    for name in DOMAIN_OPERATIONS:
        if hasattr(domain, name):
            setattr(domain, name, ledger.wrap(name, getattr(domain, name)))
    velocity = {"local_rate": lambda state: [state.u, state.v, state.w]}
    for name in STEPPER_OPERATIONS:
        setattr(stepper, name, ledger.wrap(name, getattr(stepper, name), velocity.get(name)))
    for module, name, fn in saved:
        setattr(module, name, ledger.wrap(name, fn, OPERATOR_READS.get(name)))
    try:
        yield
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)
        for name in (*DOMAIN_OPERATIONS, *STEPPER_OPERATIONS):
            for owner in (domain, stepper):
                owner.__dict__.pop(name, None)


def copy_bandwidth(xp, shape, repeat: int = 20) -> float:
    """Bytes per second of copying one float64 field of ``shape`` into another (read plus write)."""
    a = xp.ones(shape)
    b = xp.empty_like(a)
    seconds = _timed(xp, lambda: xp.copyto(b, a), repeat)
    return 2 * a.nbytes / seconds


def _timed(xp, fn, repeat: int) -> float:
    """Seconds per call of ``fn``, the median of ``repeat`` (after one untimed)."""
    fn()
    times = []
    for _ in range(repeat):
        sync = (lambda: None) if xp is np else xp.cuda.Device().synchronize
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def account(sim, steps: int) -> dict:
    """The roofline account of ``steps`` steps of ``sim`` (a one-pencil in-process
    :class:`~daskflow.Simulation`, warmed up): per operation calls, ms and bytes per step."""
    from daskflow.backend import array_module

    xp = array_module(sim.state.u)
    step_s = _timed(xp, lambda: sim.run(steps=1), max(steps, 3))
    ledger = Ledger(xp)
    with wrapped(sim, ledger):
        start = ledger.mark()
        sim.run(steps=steps)
        stop = ledger.mark()
    instrumented_s = ledger.seconds(start, stop) / steps
    bandwidth = copy_bandwidth(xp, sim.grid.shape)
    operations: dict = {}
    for name, begin, end, nbytes in ledger.records:
        row = operations.setdefault(name, {"calls": 0, "seconds": 0.0, "bytes": 0})
        row["calls"] += 1
        row["seconds"] += ledger.seconds(begin, end)
        row["bytes"] += nbytes
    rows = []
    for name, row in sorted(operations.items(), key=lambda item: -item[1]["seconds"]):
        ms, gb = 1e3 * row["seconds"] / steps, 1e-9 * row["bytes"] / steps
        rows.append({"operation": name, "calls_per_step": row["calls"] / steps, "ms_per_step": ms,
                     "gb_per_step": gb, "gb_per_s": gb / ms * 1e3 if ms else None,
                     "fraction_of_copy_bandwidth": gb * 1e9 / bandwidth / (ms * 1e-3) if ms else None})
    attributed = sum(r["ms_per_step"] for r in rows)
    must_move = sum(r["gb_per_step"] for r in rows) * 1e9
    return {
        "copy_bandwidth_gb_per_s": bandwidth * 1e-9, "step_ms": 1e3 * step_s,
        "step_ms_instrumented": 1e3 * instrumented_s, "attributed_ms": attributed,
        "unattributed_ms": 1e3 * instrumented_s - attributed, "gb_per_step": must_move * 1e-9,
        "roofline_ms": 1e3 * must_move / bandwidth, "step_fraction_of_roofline": must_move / bandwidth / step_s,
        "operations": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", type=int, nargs=3, default=[512, 256, 144])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--implicit", default="z", choices=["none", "z", "xyz"])
    parser.add_argument("--device", default="gpu", choices=["cpu", "gpu"])
    parser.add_argument("--out", default=None, help="also write the JSON document here")
    args = parser.parse_args()

    from channel_step import _config
    from emit import emit

    import daskflow
    from daskflow import Simulation
    from daskflow.backend import array_module, device_name

    cfg = _config(args.shape, args.implicit, (1, 1))
    cfg["solver"]["device"] = args.device
    sim = Simulation(cfg)
    sim.run(steps=2)  # warm-up: kernels, FFT plans, memory pool
    points = int(np.prod(args.shape))
    result = account(sim, args.steps)
    emit({"benchmark": "roofline", "device": device_name(array_module(sim.state.u)), "shape": args.shape,
          "implicit_diffusion": args.implicit, "steps": args.steps, "daskflow": daskflow.__version__,
          "ns_per_point_per_step": result["step_ms"] * 1e6 / points, **result}, args.out)


if __name__ == "__main__":
    main()
