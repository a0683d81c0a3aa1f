"""Configuration input is bounded and explicit: hostile or absurd input is refused by ``validate``
with a one-line error naming the key, before anything large is built (memory measured, not time:
CI machines are loaded), and nothing that sets the physics has a silent default."""

import copy
import dataclasses
import json
import math
import re
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from daskflow import config_input, resources
from daskflow.config import CFL_MAX, MAX_WORKERS, MAX_Z_STRETCH, load, validate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
BASE = "grid: {shape: [16, 8, 16]}\nphysics: {nu: 1e-3, forcing: {kind: none}}\n"
MINIMAL = {"grid": {"shape": [16, 8, 16]}, "physics": {"nu": 1e-3, "forcing": {"kind": "none"}}}
PEAK_MB = 200  # the most a refused configuration may cost the validating process


def _laughs(levels: int = 9) -> str:
    """A "billion laughs" flow list: ``levels`` nested aliases of ten each (10**levels items)."""
    text = "&a0 [" + ", ".join(["0"] * 10) + "]"
    for level in range(1, levels):
        text = f"&a{level} [{text}, " + ", ".join([f"*a{level - 1}"] * 9) + "]"
    return text


HOSTILE = {
    "laughs in initial.value": (BASE + f"initial: {{value: {_laughs()}}}\n", "initial.value"),
    "laughs in initial.path": (BASE + f"initial: {{path: {_laughs()}}}\n", "initial.path"),
    "laughs in a cluster list": (BASE + f"cluster: {{job_extra_directives: {_laughs()}}}\n",
                                 "cluster.job_extra_directives"),
    "deep flow nesting": (BASE + "initial: {value: " + "[" * 5000 + "]" * 5000 + "}\n", "(line 3, column 33)"),
    "deep block nesting": (BASE + "initial:\n  value:\n    " + "- " * 3000 + "1\n", "initial.value"),
    "recursive alias": (BASE + "initial: {value: &v [1, *v]}\n", "initial.value"),
    "duplicate key": ("grid: {shape: [8, 8, 8], shape: [9, 9, 9]}\nphysics: {nu: 0.1, forcing: {kind: none}}\n",
                      "grid.shape"),
    "duplicate section": (BASE + "grid: {shape: [9, 9, 9]}\n", "config grid: duplicate key"),
    "huge grid": ("grid: {shape: [100000, 100000, 100000]}\nphysics: {nu: 1e-3, forcing: {kind: none}}\n",
                  "grid.shape"),
    "huge axis": ("grid: {shape: [1000000000000, 2, 2]}\nphysics: {nu: 1e-3, forcing: {kind: none}}\n",
                  "grid.shape"),
    "infinite nu": ("grid: {shape: [8, 8, 8]}\nphysics: {nu: .inf, forcing: {kind: none}}\n", "physics.nu"),
    "nan forcing": ("grid: {shape: [8, 8, 8]}\nphysics: {nu: 0.1, forcing: {kind: flow_rate, value: [.nan, 0]}}\n",
                    "physics.forcing.value[0]"),
    "integer beyond a float": (BASE + "time: {dt: 1" + "0" * 400 + "}\n", "time.dt"),
    "absurd stretch": (BASE.replace("16]}", "16], z_stretch: 1000}"), "grid.z_stretch"),
    "absurd cfl": (BASE + "time: {cfl: 1.5}\n", "time.cfl"),
    "absurd workers": (BASE + "cluster: {workers: 100000}\n", "cluster.workers"),
    "absurd pencils": (BASE + "solver: {pencils: [1000, 1000]}\n", "solver.pencils"),
    "tls without key": (BASE + "cluster: {tls: {ca_file: CA, cert: CA}}\n", "cluster.tls.key"),
    "empty file": ("", "config (root): empty configuration; required: grid.shape, physics.nu, physics.forcing"),
    "comments only": ("# nothing here\n", "config (root): empty configuration"),
    "too large a file": (BASE + "# " + "x" * (config_input.MAX_FILE_BYTES + 10) + "\n", "larger than"),
    "many values": (BASE + "output: {slices: {z: [" + ", ".join(["0.5"] * 50000) + "]}}\n", "output.slices.z"),
}

_MEASURE = textwrap.dedent("""
    import json, resource, subprocess, sys
    proc = subprocess.run([sys.executable, "-m", "daskflow", "validate", sys.argv[1]], capture_output=True,
                          text=True, timeout=120)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # kB on Linux
    print(json.dumps({"rc": proc.returncode, "stderr": proc.stderr, "peak_mb": peak}))
""")


def _validate_in_subprocess(path: Path) -> dict:
    """``daskflow validate PATH`` in a fresh process, with its peak RSS (a middle process waits for it,
    so that only this child counts in RUSAGE_CHILDREN)."""
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(path)], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_files_are_refused_by_validate_with_little_memory(tmp_path, name):
    text, expected = HOSTILE[name]
    path = tmp_path / "hostile.yaml"
    path.write_text(text.replace(": CA", f": {path}"))  # the TLS case: an existing file
    result = _validate_in_subprocess(path)
    lines = [line for line in result["stderr"].splitlines() if line.strip()]
    assert result["rc"] == 2 and len(lines) == 1, result["stderr"]
    assert expected in lines[0] and "Traceback" not in result["stderr"]
    assert lines[0].startswith("daskflow validate: config")
    assert result["peak_mb"] < PEAK_MB, result


def test_a_valid_file_passes_in_the_same_measurement(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(BASE)
    result = _validate_in_subprocess(path)
    assert result["rc"] == 0, result["stderr"]
    assert result["peak_mb"] < PEAK_MB


def _shared_laughs(levels: int = 9) -> list:
    value = [0.0] * 10
    for _ in range(levels - 1):
        value = [value] * 10  # one list referenced ten times: 10**levels items when expanded
    return value


@pytest.mark.parametrize("where", [("initial", "value"), ("initial", "path"), ("output", "slices"),
                                   ("cluster", "job_extra_directives"), ("boundaries", "u")])
def test_shared_lists_in_a_dict_are_refused_before_they_are_copied(where):
    cfg = copy.deepcopy(MINIMAL)
    cfg.setdefault(where[0], {})[where[1]] = _shared_laughs()
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=f"config {'.'.join(where)}: holds more than"):
            validate(cfg)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20e6


def test_self_reference_and_depth_in_a_dict_are_errors_not_recursion():
    cfg = copy.deepcopy(MINIMAL)
    loop: list = [1.0]
    loop.append(loop)
    cfg["initial"] = {"value": loop}
    with pytest.raises(ValueError, match="config initial.value: contains itself"):
        validate(cfg)
    deep: list = [0.0]
    for _ in range(10000):
        deep = [deep]
    cfg["initial"] = {"value": deep}
    with pytest.raises(ValueError, match="config initial.value: nested more than"):
        validate(cfg)


def test_duplicate_keys_are_named_and_merge_keys_still_work(tmp_path):
    with pytest.raises(ValueError, match=r"config physics\.nu: duplicate key \(at line 2"):
        config_input.parse("grid: {shape: [8, 8, 8]}\nphysics: {nu: 1, nu: 2}\n")
    merged = config_input.parse("base: &b {x: 1, y: 2}\nother: {<<: *b, y: 3}\n")
    assert merged["other"] == {"x": 1, "y": 3}


def test_yaml_12_numbers_only_in_daskflows_loader():
    import yaml

    text = "a: [1e-3, 1E5, 1.0e3, -2e+2, .5e1, 1.5, 10, 010, 0o17, 0x1F, .inf, 3e, 1_000, 1:20, '1e3']\n"
    data = config_input.parse(text)["a"]
    assert data[:10] == [0.001, 100000.0, 1000.0, -200.0, 5.0, 1.5, 10, 10, 15, 31]
    assert [type(v) for v in data[:10]] == [float] * 6 + [int] * 4
    assert data[10] == math.inf and data[11:] == ["3e", "1_000", "1:20", "1e3"]
    assert yaml.safe_load(text)["a"][:1] + yaml.safe_load(text)["a"][7:8] == ["1e-3", 8]  # PyYAML's own: YAML 1.1


def test_nu_in_exponent_notation_is_a_float(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("grid: {shape: [8, 8, 8]}\nphysics: {nu: 1e-3, forcing: {kind: flow_rate, value: [1, 0]}}\n")
    assert load(path)["physics"]["nu"] == 0.001


def test_yaml_syntax_errors_are_one_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(BASE + "time: {cfl: [1\n")
    with pytest.raises(ValueError) as info:
        load(path)
    assert "not valid YAML" in str(info.value) and "line" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("cfg, key", [
    ({}, "(root)"),
    ({"physics": {"nu": 0.1, "forcing": {"kind": "none"}}}, "grid.shape"),
    ({"grid": {"shape": [8, 8, 8]}, "physics": {"forcing": {"kind": "none"}}}, "physics.nu"),
    ({"grid": {"shape": [8, 8, 8]}, "physics": {"nu": None, "forcing": {"kind": "none"}}}, "physics.nu"),
    ({"grid": {"shape": [8, 8, 8]}, "physics": {"nu": 0.1}}, "physics.forcing"),
    ({"grid": {"shape": [8, 8, 8]}, "physics": {"nu": 0.1, "forcing": {"value": [1, 0]}}}, "physics.forcing.kind"),
    ({"grid": {"shape": [8, 8, 8]}, "physics": {"nu": 0.1, "forcing": {"kind": "flow_rate"}}},
     "physics.forcing.value"),
])
def test_what_sets_the_physics_has_no_default(cfg, key):
    with pytest.raises(ValueError, match=f"^config {re.escape(key)}: "):
        validate(cfg)


def test_every_missing_required_key_is_named_at_once():
    with pytest.raises(ValueError) as info:
        validate({"time": {"steps": 3}})
    message = str(info.value)
    assert message.startswith("config grid.shape: required") and "physics.nu, physics.forcing" in message


def test_forcing_none_needs_no_value():
    assert validate(MINIMAL)["physics"]["forcing"] == {"kind": "none", "value": [0.0, 0.0]}


FINITE = [("physics", "nu"), ("time", "dt"), ("time", "dt_max"), ("time", "end_time"), ("time", "cfl"),
          ("initial", "amplitude"), ("grid", "z_stretch")]


@pytest.mark.parametrize("section, key", FINITE)
@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan, 10**400])
def test_numbers_are_finite(section, key, bad):
    cfg = copy.deepcopy(MINIMAL)
    cfg.setdefault(section, {})[key] = bad
    with pytest.raises(ValueError, match=f"config {section}.{key}: must be a finite number"):
        validate(cfg)


@pytest.mark.parametrize("section, key, value, where", [
    ("grid", "lengths", [1.0, math.inf, 1.0], "grid.lengths[1]"),
    ("initial", "value", [0.0, math.nan, 0.0], "initial.value[1]"),
    ("output", "slices", {"z": [math.nan]}, "output.slices.z[0]"),
    ("boundaries", "u", {"z_values": [0.0, math.inf]}, "boundaries.u.z_values[1]"),
])
def test_numbers_inside_lists_are_finite(section, key, value, where):
    cfg = copy.deepcopy(MINIMAL)
    cfg.setdefault(section, {})[key] = value
    with pytest.raises(ValueError, match=f"config {re.escape(where)}: must be a finite number"):
        validate(cfg)


def test_forcing_values_are_finite():
    cfg = copy.deepcopy(MINIMAL)
    cfg["physics"]["forcing"] = {"kind": "pressure_gradient", "value": [math.inf, 0.0]}
    with pytest.raises(ValueError, match=r"config physics.forcing.value\[0\]: must be a finite number"):
        validate(cfg)


def test_z_stretch_bounds():
    cfg = copy.deepcopy(MINIMAL)
    cfg["grid"]["z_stretch"] = MAX_Z_STRETCH
    assert validate(cfg)["grid"]["z_stretch"] == MAX_Z_STRETCH
    for bad in (1000, MAX_Z_STRETCH + 0.5, -1.0):
        cfg["grid"]["z_stretch"] = bad
        with pytest.raises(ValueError, match=r"config grid.z_stretch: must lie in \[0.0, 10.0\]"):
            validate(cfg)


def test_the_largest_stretch_allowed_still_gives_positive_cells():
    from daskflow.grid import Z_CLUSTERS, Grid

    for cluster in Z_CLUSTERS:
        assert (Grid((4, 4, 256), z_stretch=MAX_Z_STRETCH, z_cluster=cluster).dzf > 0).all()


def test_cfl_beyond_the_rk3_limit_is_refused():
    cfg = copy.deepcopy(MINIMAL)
    cfg["time"] = {"cfl": CFL_MAX}
    assert validate(cfg)["time"]["cfl"] == 1.0
    cfg["time"] = {"cfl": 1.05}
    with pytest.raises(ValueError, match=r"config time.cfl: must lie in \(0, 1.0\].*sqrt\(3\)"):
        validate(cfg)


def test_cfl_one_is_the_steppers_advective_limit():
    """``time.cfl`` multiplies sqrt(3), RK3's advective stability limit, in the stepper."""
    from daskflow import Simulation

    sim = Simulation(copy.deepcopy(MINIMAL))
    assert sim.stepper.dt_limit(2.0, CFL_MAX, 1e9) == pytest.approx(math.sqrt(3) / 2.0)


@pytest.mark.parametrize("cluster, key", [({"workers": 0}, "cluster.workers"),
                                          ({"workers": MAX_WORKERS + 1}, "cluster.workers"),
                                          ({"workers": 2.5}, "cluster.workers"),
                                          ({"threads_per_worker": 1.5}, "cluster.threads_per_worker"),
                                          ({"nodes": 10**6}, "cluster.nodes"),
                                          ({"memory": "lots"}, "cluster.memory")])
def test_cluster_counts_are_bounded_whole_numbers(cluster, key):
    cfg = copy.deepcopy(MINIMAL)
    cfg["cluster"] = cluster
    with pytest.raises(ValueError, match=f"config {key}: "):
        validate(cfg)
    cfg["cluster"] = {"workers": MAX_WORKERS}
    assert validate(cfg)["cluster"]["workers"] == MAX_WORKERS


def test_pencils_product_is_bounded():
    cfg = copy.deepcopy(MINIMAL)
    cfg["solver"] = {"pencils": [128, 64]}
    with pytest.raises(ValueError, match=f"config solver.pencils: .*beyond {MAX_WORKERS}"):
        validate(cfg)


def _pem_files(tmp_path) -> dict:
    files = {}
    for key in ("ca_file", "cert", "key"):
        files[key] = str(tmp_path / f"{key}.pem")
        Path(files[key]).write_text("PEM\n")
    return files


def test_tls_is_null_false_or_exactly_three_readable_files(tmp_path):
    cfg = copy.deepcopy(MINIMAL)
    files = _pem_files(tmp_path)
    for good in (None, False, files):
        cfg["cluster"] = {"tls": good}
        assert validate(cfg)["cluster"]["tls"] == good
    for bad, key in (({k: v for k, v in files.items() if k != "cert"}, "cluster.tls.cert"),
                     ({**files, "password": "x"}, "cluster.tls.password"),
                     ({**files, "key": str(tmp_path / "absent.pem")}, "cluster.tls.key"),
                     ({**files, "ca_file": str(tmp_path)}, "cluster.tls.ca_file"),
                     ({**files, "ca_file": 3}, "cluster.tls.ca_file"),
                     (True, "cluster.tls"), ("yes", "cluster.tls")):
        cfg["cluster"] = {"tls": bad}
        with pytest.raises(ValueError, match=f"config {key}: "):
            validate(cfg)


GIB = 1 << 30


def test_a_grid_beyond_the_memory_is_refused_with_needed_and_available_bytes(monkeypatch):
    monkeypatch.setattr(resources, "host_memory", lambda: 24 * GIB)
    cfg = {"grid": {"shape": [1000, 1000, 1000]}, "physics": {"nu": 1e-3, "forcing": {"kind": "none"}}}
    with pytest.raises(ValueError) as info:
        validate(cfg)
    message = str(info.value)
    assert message.startswith("config grid.shape: [1000, 1000, 1000] in float64 needs about")
    assert f"({24 * GIB} bytes)" in message and "solver.max_memory_fraction" in message
    cfg["solver"] = {"max_memory_fraction": None}  # the explicit override
    assert validate(cfg)["grid"]["shape"] == [1000, 1000, 1000]
    cfg["grid"]["shape"] = [256, 256, 256]
    cfg["solver"] = {}
    validate(cfg)  # 3 GiB of fields fit into 24


def test_job_queues_compare_one_pencil_with_one_workers_memory():
    cfg = load({"grid": {"shape": [512, 256, 144]}, "physics": {"nu": 1e-3, "forcing": {"kind": "none"}},
                "solver": {"pencils": [8, 1]}, "cluster": {"kind": "slurm", "memory": "256GB"}})
    assert resources.worker_bytes(cfg) < 8 * GIB
    cfg = dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, memory="1GB"))  # 250 MB per GPU worker
    with pytest.raises(ValueError, match="per worker .* cluster.memory 1GB over cluster.gpus_per_node 4"):
        resources.check(cfg, host=1 << 40)


def test_the_memory_estimate_bounds_a_measured_run():
    """The bytes per point of :mod:`daskflow.resources` bound what a run allocates (tracemalloc, after
    one warm-up step) for each way of treating diffusion."""
    from daskflow import Simulation
    from tests.helpers import CHANNEL

    for implicit, pencils in (("none", [1, 1]), ("z", [1, 2]), ("xyz", [1, 2])):
        cfg = copy.deepcopy(CHANNEL)
        cfg["grid"]["shape"] = [32, 16, 24]
        cfg["time"]["implicit_diffusion"] = implicit
        cfg["solver"] = {"pencils": pencils, "device": "cpu"}
        cfg["cluster"] = {"kind": "none"}
        sim = Simulation(cfg).run(steps=1)
        tracemalloc.start()
        try:
            sim.run(steps=2)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        state = 4 * np.prod(cfg["grid"]["shape"]) * 8  # allocated before tracing started
        estimate = resources.needs(sim.config, 1 << 40)[0][0]
        assert peak + state < estimate, (implicit, peak + state, estimate)


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_examples_are_complete_and_validate_to_themselves(example):
    cfg = load(EXAMPLES / example).to_dict()
    assert validate(copy.deepcopy(cfg)) == cfg
    json.dumps(cfg)


@pytest.mark.parametrize("key", ["a\nb", "x" * 1000, 10**5000], ids=["newline", "long", "huge-integer"])
def test_odd_keys_are_named_on_one_short_line(key):
    with pytest.raises(ValueError) as info:
        validate({**MINIMAL, key: 1})
    assert "\n" not in str(info.value) and len(str(info.value)) < 200


@pytest.mark.parametrize("bad", [0, -3, 2.5, 1001, "5", True])
def test_cfl_every_is_a_whole_number_of_steps_from_1_to_1000(bad):
    cfg = copy.deepcopy(MINIMAL)
    cfg["time"] = {**cfg.get("time", {}), "cfl_every": bad}
    with pytest.raises(ValueError, match=r"^config time\.cfl_every: must be a"):
        validate(cfg)
    cfg["time"]["cfl_every"] = 10
    assert validate(cfg)["time"]["cfl_every"] == 10 and validate(MINIMAL)["time"]["cfl_every"] == 1
