"""Phase timing of the stepper's domain: every phase is charged, results are unchanged."""

import copy

import numpy as np

from daskflow import Simulation
from daskflow.backend import to_numpy
from daskflow.profiling import PhaseClock, TimedDomain, device_sync, merge
from tests.helpers import CHANNEL, FLOW_RATE


def test_timed_domain_charges_each_phase_and_changes_nothing():
    cfg = copy.deepcopy(CHANNEL)
    cfg["physics"] = {"nu": 0.01, "forcing": FLOW_RATE}  # a bulk-velocity sum every substep
    cfg["time"]["implicit_diffusion"] = "z"
    plain, timed = Simulation(cfg), Simulation(cfg)
    clock = PhaseClock(device_sync("cpu"))
    timed.stepper.domain = TimedDomain(timed.stepper.domain, clock)
    with clock("task"):
        timed.run(steps=2)
    plain.run(steps=2)
    for name in "uvwp":
        np.testing.assert_array_equal(to_numpy(getattr(timed.state, name)), to_numpy(getattr(plain.state, name)))
    report = clock.report()
    calls = {phase: entry["calls"] for phase, entry in report.items()}
    assert calls == {"halo": 18, "poisson": 6, "implicit": 18, "task": 1}  # reductions ride on halos
    inside = sum(e["seconds"] for p, e in report.items() if p != "task")
    assert 0 < inside < report["task"]["seconds"]
    assert merge(merge({}, report), report)["halo"]["calls"] == 36
