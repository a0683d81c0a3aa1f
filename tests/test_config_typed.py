"""The typed run configuration (:mod:`daskflow.run_config`): what :func:`daskflow.config.load` returns,
its exact round trip to the validated dict, immutability, pickling, and that every public entry point
takes it as it takes a dict."""

import copy
import dataclasses
import pickle
from pathlib import Path

import numpy as np
import pytest
from distributed import Client, LocalCluster

from daskflow import Simulation
from daskflow.backend import to_numpy
from daskflow.config import DEFAULTS, load, updated, validate
from daskflow.config_input import read
from daskflow.run_config import ForcingConfig, InitialConfig, OutputConfig, RunConfig, Section, TimeConfig
from tests.helpers import CHANNEL

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_every_example_loads_to_a_run_config_equal_to_the_validated_dict(example):
    cfg = load(EXAMPLES / example)
    assert isinstance(cfg, RunConfig)
    assert cfg.to_dict() == validate(read(EXAMPLES / example))
    assert load(cfg.to_dict()) == cfg and load(cfg) is cfg
    assert cfg.grid.mesh.shape == tuple(cfg.grid.shape) and cfg.grid.mesh is cfg.grid.mesh  # built once


def test_the_sections_have_exactly_the_schema_keys():
    cfg = load(CHANNEL)
    for name, section in DEFAULTS.items():
        fields = {f.name for f in dataclasses.fields(getattr(cfg, name))}
        assert name == "boundaries" or fields == set(section), name
    assert {f.name for f in dataclasses.fields(cfg)} == set(DEFAULTS)


def test_optional_mappings_round_trip_as_given(tmp_path):
    """Boundary overrides (an empty one too), slices and TLS files keep exactly the keys given."""
    files = {}
    for name in ("ca_file", "cert", "key"):
        (tmp_path / name).write_text("PEM")
        files[name] = str(tmp_path / name)
    given = {**CHANNEL, "boundaries": {"u": {"z": "DD", "z_values": [0.0, 1.0]}, "v": {}, "p": {"z": "NN"}},
             "output": {"slices": {"z": [0.5, 1.0], "x": [1]}}, "cluster": {"tls": files}}
    cfg = load(given)
    assert cfg.to_dict() == validate(copy.deepcopy(given))
    assert cfg.boundaries.preset is None and cfg.boundaries.u.z_values == (0.0, 1.0) and cfg.boundaries.w is None
    assert cfg.output.slices.to_dict() == {"z": [0.5, 1.0], "x": [1.0]} and cfg.cluster.tls.cert == files["cert"]
    assert load({**CHANNEL, "cluster": {"tls": False}}).cluster.tls is False


def test_a_run_config_is_frozen_all_the_way_down():
    cfg = load(CHANNEL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.time = None
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.time.steps = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.physics.forcing.kind = "none"
    assert isinstance(cfg.grid.shape, tuple) and isinstance(cfg.physics.forcing.value, tuple)
    assert hash(cfg) == hash(load(CHANNEL))


def test_a_run_config_pickles():
    cfg = load({**CHANNEL, "output": {"slices": {"y": [1.0]}}})
    again = pickle.loads(pickle.dumps(cfg))
    assert again == cfg and again.to_dict() == cfg.to_dict()
    assert pickle.loads(pickle.dumps(cfg.grid)).mesh.shape == cfg.grid.mesh.shape  # also once the grid is built


def test_sections_read_by_key_as_the_dict_was():
    cfg = load(CHANNEL)
    assert cfg["physics"]["nu"] == cfg.physics.nu == 0.01 and cfg["time"]["dt"] is None
    with pytest.raises(KeyError):
        cfg["physics"]["viscosity"]
    with pytest.raises(KeyError):
        cfg["boundaries"]["u"]  # not given: absent, as in the dict


def test_a_bad_key_raises_the_same_message_naming_it():
    with pytest.raises(ValueError, match=r"config grid.shpe: unknown key \(did you mean 'shape'\?"):
        load({**CHANNEL, "grid": {"shpe": [8, 8, 8]}})
    with pytest.raises(ValueError, match=r"config time.cfl: must lie in \(0, 1.0\]"):
        load({**CHANNEL, "time": {"cfl": 2.0}})
    cfg = load(CHANNEL)
    with pytest.raises(ValueError, match=r"config time.stpes: unknown key \(did you mean 'steps'\?"):
        updated(cfg, time={"stpes": 3})
    assert updated(cfg, time={"dt": 0.01}).time.dt == 0.01 and cfg.time.dt is None


def test_from_dict_refuses_keys_outside_the_schema():
    with pytest.raises(KeyError, match="no field 'extra'"):
        RunConfig.NESTED["time"].from_dict({**validate(CHANNEL)["time"], "extra": 1})
    assert issubclass(RunConfig, Section)


def test_simulation_takes_the_typed_config_and_the_dict_equally():
    cfg = copy.deepcopy(CHANNEL)
    cfg["grid"]["shape"] = [8, 4, 12]
    from_dict, from_typed = Simulation(cfg), Simulation(load(cfg))
    assert from_dict.config == from_typed.config and isinstance(from_dict.config, RunConfig)
    from_dict.run(steps=3)
    from_typed.run(steps=3)
    for name in ("u", "v", "w", "p"):
        assert np.array_equal(to_numpy(getattr(from_dict.state, name)), to_numpy(getattr(from_typed.state, name)))


def test_set_time_changes_the_steps_that_follow():
    cfg = copy.deepcopy(CHANNEL)
    cfg["grid"]["shape"] = [8, 4, 12]
    sim = Simulation(cfg)
    sim.set_time(dt=1e-3)
    sim.run(steps=2)
    assert sim.dt == 1e-3 and sim.config.time.dt == 1e-3
    with pytest.raises(ValueError, match="config time.dt: must be positive"):
        sim.set_time(dt=-1.0)


PLAN_SECTIONS = {"forcing": ForcingConfig, "time": TimeConfig, "output": OutputConfig, "initial": InitialConfig}


def _plan_sections(plan) -> dict:
    """The configuration sections ``plan`` (a FlowPlan) holds, each with whether it is of its typed
    class and refuses to be changed (checked where the plan is: here or on a worker)."""
    out = {}
    for name, kind in PLAN_SECTIONS.items():
        section = getattr(plan, name)
        try:
            setattr(section, dataclasses.fields(section)[0].name, None)
            frozen = False
        except dataclasses.FrozenInstanceError:
            frozen = True
        out[name] = (section, isinstance(section, kind) and frozen)
    return out


def _expected_sections(cfg: RunConfig) -> dict:
    return {"forcing": cfg.physics.forcing, "time": cfg.time, "output": cfg.output, "initial": cfg.initial}


def _plan_config(tmp_path: Path, pencils: list[int]) -> dict:
    cfg = copy.deepcopy(CHANNEL)
    cfg["grid"]["shape"] = [8, 4, 12]
    cfg["solver"] = {"pencils": pencils}
    cfg["output"] = {"store": str(tmp_path / "run.zarr"), "scalars_every": 1, "slices": {"z": [0.5]}}
    return cfg


def test_the_flow_plan_holds_the_run_config_s_typed_sections(tmp_path):
    sim = Simulation(_plan_config(tmp_path, [1, 1]))
    sections = _plan_sections(sim._flow_plan)
    for name, section in _expected_sections(sim.config).items():
        assert sections[name] == (section, True) and sections[name][0] is section, name
    sim.set_time(dt=1e-3)  # a new frozen time section, read by the steps that follow
    assert sim._flow_plan.time is sim.config.time and sim._flow_plan.time.dt == 1e-3
    sim.run(steps=2)
    assert sim.dt == 1e-3


@pytest.mark.timeout(180)
def test_the_workers_plans_hold_the_run_config_s_typed_sections(tmp_path):
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        sim = Simulation(_plan_config(tmp_path, [1, 2]), client=client)

        def on_workers() -> dict:
            plans = sim._cluster.plans
            assert set(plans) == set(client.scheduler_info()["workers"]) and len(plans) == 2
            return {worker: client.submit(_plan_sections, plan, workers=[worker], pure=False).result()
                    for worker, plan in plans.items()}

        expected = {name: (section, True) for name, section in _expected_sections(sim.config).items()}
        assert all(got == expected for got in on_workers().values())
        sim.set_time(dt=1e-3)  # replaces the time section and places the plans again
        expected["time"] = (sim.config.time, True)
        assert all(got == expected for got in on_workers().values())
        assert expected["time"][0].dt == 1e-3
        sim.run(steps=2)
        assert sim.dt == 1e-3
