"""benchmarks/roofline.py: every operation of a step recorded once, with the bytes it must move."""

import numpy as np
import pytest

from daskflow import Simulation
from daskflow.ns import operators as ops
from tests.helpers import benchmark_module


def test_the_account_of_a_z_implicit_step_counts_each_operation_and_its_bytes():
    roofline = benchmark_module("roofline")
    shape = (16, 8, 6)
    sim = Simulation({"grid": {"shape": list(shape), "lengths": [2.0, 1.0, 2.0], "z_stretch": 1.5},
                      "physics": {"nu": 0.01, "forcing": {"kind": "flow_rate", "value": [1.0, 0.0]}},
                      "boundaries": {"preset": "channel"}, "initial": {"kind": "turbulent_channel", "seed": 0},
                      "time": {"cfl": 0.5, "dt_max": 0.01, "implicit_diffusion": "z"}, "solver": {"device": "cpu"}})
    sim.run(steps=1)
    update = ops.update
    result = roofline.account(sim, steps=2)
    assert ops.update is update and "pad" not in vars(sim.stepper.domain)  # the wrappers are gone
    assert sim.step == 1 + 1 + 3 + 2  # one untimed and three timed steps, then the recorded ones
    rows = {r["operation"]: r for r in result["operations"]}
    field = np.prod(shape) * 8 / 1e9
    padded = np.prod([n + 2 for n in shape]) * 8 / 1e9
    calls = {"pad_and_reduce": 4, "pad_velocity": 2, "pad": 3, "explicit_terms": 3, "update": 18, "implicit_z": 9,
             "divergence": 3, "solve_pressure": 3, "pressure_update": 3, "local_rate": 1}
    assert {name: row["calls_per_step"] for name, row in rows.items()} == calls
    expected_gb = {
        "pad_velocity": 2 * 4 * (field + padded),  # u, v, w, p read, padded copies written
        "pad_and_reduce": 4 * (field + padded) + 3 * 3 * (field + padded),  # with p for the rate, then u*
        "pad": 3 * (field + padded),
        "explicit_terms": 3 * 3 * (padded + field),
        "divergence": 3 * (3 * padded + field),
        "solve_pressure": 3 * 2 * field,
        "implicit_z": 9 * 3 * field,  # the increment read and written in place, the component read: u + du
        "local_rate": 3 * field,
        # the predictor's updates read P, the padded component (its second differences in the same
        # pass) and one term in the first substep, two later, and write the increment; the
        # projection's read P and update a component in place (read and written)
        "update": 3 * (2 * padded + 2 * field) + 6 * (2 * padded + 3 * field) + 9 * (padded + 2 * field),
        "pressure_update": 3 * (3 * field + padded),  # p, phi and the padded phi read, p written
    }
    for name, gb in expected_gb.items():
        assert rows[name]["gb_per_step"] == pytest.approx(gb, rel=1e-12), name
    assert result["gb_per_step"] == pytest.approx(sum(r["gb_per_step"] for r in rows.values()))
    assert 0 < result["attributed_ms"] <= result["step_ms_instrumented"]
    assert result["roofline_ms"] == pytest.approx(result["gb_per_step"] * 1e9 / result["copy_bandwidth_gb_per_s"] / 1e6)
    assert 0 < result["step_fraction_of_roofline"] == pytest.approx(result["roofline_ms"] / result["step_ms"])


def test_without_implicit_axes_the_pressure_update_reads_no_padded_phi():
    """With explicit diffusion the pressure update is ``p + phi``: the account charges it the two
    fields it reads and the one it writes, not the padded solution it is handed."""
    roofline = benchmark_module("roofline")
    shape = (16, 8, 6)
    sim = Simulation({"grid": {"shape": list(shape), "lengths": [2.0, 1.0, 2.0], "z_stretch": 1.5},
                      "physics": {"nu": 0.01, "forcing": {"kind": "flow_rate", "value": [1.0, 0.0]}},
                      "boundaries": {"preset": "channel"}, "initial": {"kind": "turbulent_channel", "seed": 0},
                      "time": {"cfl": 0.5, "dt_max": 0.01}, "solver": {"device": "cpu"}})
    sim.run(steps=1)
    rows = {r["operation"]: r for r in roofline.account(sim, steps=1)["operations"]}
    field = np.prod(shape) * 8 / 1e9
    assert rows["pressure_update"]["gb_per_step"] == pytest.approx(3 * 3 * field, rel=1e-12)
