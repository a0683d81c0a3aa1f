"""``daskflow run / validate / info`` in subprocesses: runs, restarts, clean stops."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import xarray as xr
import yaml

from daskflow import config

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _small_config(tmp_path, **time_section):
    cfg = yaml.safe_load((EXAMPLES / "channel-small.yaml").read_text())
    cfg["grid"]["shape"] = [16, 8, 16]
    cfg["time"].update(time_section)
    cfg["output"].update({"store": str(tmp_path / "run.zarr"), "checkpoint_every": 5, "fields_every": 5})
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _daskflow(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "daskflow", *args], capture_output=True, text=True, timeout=300,
                          **kwargs)


def test_examples_validate():
    for example in EXAMPLES.glob("*.yaml"):
        proc = _daskflow("validate", str(example))
        assert proc.returncode == 0 and "valid" in proc.stdout, proc.stderr


def test_validate_names_the_bad_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("grid: {shape: [8, 8, 8]}\ntime: {implicit_diffusion: y}\n")
    proc = _daskflow("validate", str(bad))
    assert proc.returncode == 2 and "time.implicit_diffusion" in proc.stderr and "none, z, xyz" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_run_on_the_embedded_cluster_then_restart(tmp_path):
    config = _small_config(tmp_path, steps=10)
    proc = _daskflow("run", str(config), "--report-every", "5", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "dashboard" in proc.stderr and "step 10" in proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["steps"] == 10
    refused = _daskflow("run", str(config), cwd=tmp_path)
    assert refused.returncode == 2 and "--restart" in refused.stderr  # never overwrites a store
    proc = _daskflow("run", str(config), "--restart", "--steps", "15", "--cluster", "none", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["steps"] == 15
    steps = xr.open_zarr(str(tmp_path / "run.zarr"), group="scalars", consolidated=False)["step"].values
    assert list(steps) == list(range(1, 16))


def test_info_reports_versions():
    proc = _daskflow("info")
    assert proc.returncode == 0
    info = json.loads(proc.stdout)
    assert info["versions"]["dask"] and "default_cluster" in info
    # what cluster.comm: auto times on several workers: always the mailbox, last
    assert info["exchange_candidates"][-1] == "mailbox" and info["exchanges"] in info["exchange_candidates"]
    assert info["compiled_cpu_loops"] is (info["versions"]["numba"] is not None)  # numba is a dependency
    # NCCL's copy engines need NCCL 2.28 (none without CuPy); off unless daskflow.copy-engine is set
    nccl = info["versions"]["nccl"]
    has_engines = nccl is not None and tuple(int(part) for part in nccl.split(".")[:2]) >= (2, 28)
    assert info["copy_engine"]["nccl_available"] == has_engines and info["copy_engine"]["setting"] == "none"
    # IPC needs a GPU that reaches every other one directly
    assert info["copy_engine"]["ipc_available"] in ((False,) if info["gpus"] == 0 else (True, False))
    assert info["cuda_graphs"] == {"one_pencil_points": 4194304, "pencils": True,  # the declared defaults
                                   "points_per_pencil": 33554432}
    assert info["transpose_slabs"] == {"captured_step": 3, "otherwise": 1}
    assert info["control_interval_s"] == 0.0005 and info["ucx_error_handling"] is False


def test_info_reports_the_settings_in_force(tmp_path):
    env = {**os.environ, "DASK_DASKFLOW__DISTRIBUTED_CUDA_GRAPHS": "False", "DASK_DASKFLOW__CONTROL_INTERVAL": "0.002",
           "DASK_DASKFLOW__STEP_TRANSPOSE_SLABS": "2", "DASK_DASKFLOW__UCX_ERROR_HANDLING": "True"}
    proc = _daskflow("info", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["cuda_graphs"]["pencils"] is False and info["control_interval_s"] == 0.002
    assert info["transpose_slabs"]["captured_step"] == 2 and info["ucx_error_handling"] is True


def test_jobscript_for_slurm_and_pbs(tmp_path):
    for name, marker in (("slurm-gpu.yaml", "#SBATCH"), ("pbs-gpu.yaml", "#PBS")):
        deploy = yaml.safe_load((EXAMPLES.parent / "deploy" / name).read_text())
        cfg = yaml.safe_load((EXAMPLES / "channel180.yaml").read_text())
        cfg.update(deploy)
        path = tmp_path / name
        path.write_text(yaml.safe_dump(cfg))
        proc = _daskflow("jobscript", str(path))
        assert proc.returncode == 0, proc.stderr
        # NCCL carries the exchanges between the GPUs: Dask's own comms use TCP (no UCX progress loop)
        assert marker in proc.stdout and "dask_cuda.cli" in proc.stdout and "--protocol tcp" in proc.stdout
        assert "12:00:00" in proc.stdout and ("gpus-per-node=4" in proc.stdout or "ngpus=4" in proc.stdout)
        assert "export MALLOC_TRIM_THRESHOLD_=1073741824" in proc.stdout
        assert "export MALLOC_MMAP_THRESHOLD_=33554432" in proc.stdout
    proc = _daskflow("jobscript", str(EXAMPLES / "channel-small.yaml"))
    assert proc.returncode == 2 and "cluster.kind" in proc.stderr


def _jobscript(capsys, *args) -> tuple[int, str, str]:
    from daskflow.cli import main

    code = main(["jobscript", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_jobscript_of_every_example_names_a_scheduler_of_the_workers_protocol(tmp_path, capsys, monkeypatch):
    """``daskflow jobscript EXAMPLE --kind slurm|pbs`` for every shipped example: the workers join a
    scheduler through a real scheduler file (never an address placeholder), and the scheduler the
    script's comments start, and the run, use that file with the workers' protocol. A UCX or TLS
    cluster gets the same protocol (and files) on both sides; a cluster.address of another protocol
    than the workers' is refused, one of theirs is written as it is."""
    import re

    from distributed.security import Security

    monkeypatch.chdir(tmp_path)
    for example in sorted(EXAMPLES.glob("*.yaml")):
        for kind, marker in (("slurm", "#SBATCH"), ("pbs", "#PBS")):
            code, script, err = _jobscript(capsys, example, "--kind", kind)
            assert code == 0, err
            path = tmp_path / f"{example.stem}-scheduler.json"  # the default: beside where it is asked
            (worker,) = [line for line in script.splitlines() if "dask_cuda.cli" in line]
            protocol = re.search(r"--protocol (\w+)", worker).group(1)
            assert marker in script and "SCHEDULER-ADDRESS" not in script and "insert" not in script
            assert f"dask_cuda.cli --scheduler-file {path} " in worker
            assert f"dask scheduler --scheduler-file {path} --protocol {protocol}\n" in script
            assert f"daskflow run {example} --cluster scheduler-file:{path}\n" in script
    shared = tmp_path / "shared" / "s.json"
    temporary = Security.temporary()
    files = {}
    for name, text in (("ca_file", temporary.tls_ca_file), ("cert", temporary.tls_worker_cert),
                       ("key", temporary.tls_worker_key)):
        files[name] = str(tmp_path / f"{name}.pem")
        Path(files[name]).write_text(text)
    cfg = yaml.safe_load((EXAMPLES / "channel-small.yaml").read_text())
    for cluster, protocol, extra in (({"protocol": "ucx", "tls": False}, "ucx", ""),
                                     ({"tls": files}, "tls", f" --tls-ca-file {files['ca_file']} --tls-cert "
                                                             f"{files['cert']} --tls-key {files['key']}")):
        config = tmp_path / "c.yaml"
        config.write_text(yaml.safe_dump({**cfg, "cluster": {"kind": "slurm", **cluster}}))
        code, script, err = _jobscript(capsys, config, "--scheduler-file", shared)
        (worker,) = [line for line in script.splitlines() if "dask_cuda.cli" in line]
        assert code == 0 and f"--scheduler-file {shared} " in worker and f"--protocol {protocol}" in worker, err
        assert f"dask scheduler --scheduler-file {shared} --protocol {protocol}{extra}\n" in script
    config.write_text(yaml.safe_dump({**cfg, "cluster": {"kind": "pbs", "protocol": "ucx", "tls": False,
                                                         "address": "tcp://login1:8786"}}))
    code, script, err = _jobscript(capsys, config)
    assert code == 2 and script == "" and "cluster.address" in err and "ucx" in err and "tcp" in err
    config.write_text(yaml.safe_dump({**cfg, "cluster": {"kind": "pbs", "protocol": "ucx", "tls": False,
                                                         "address": "ucx://login1:8786"}}))
    code, script, err = _jobscript(capsys, config)
    assert code == 0 and "dask_cuda.cli ucx://login1:8786 " in script and "--protocol ucx" in script, err
    assert f"daskflow run {config} --cluster ucx://login1:8786" in script
    assert list(tmp_path.glob("*.json")) == [] and not shared.parent.exists()  # nothing is started or written


def test_cluster_address_must_be_given(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: {kind: address}\n")
    proc = _daskflow("validate", str(bad))
    assert proc.returncode == 2 and "cluster.address" in proc.stderr


def test_validate_checks_what_the_simulation_needs(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("grid: {shape: [8, 8, 8]}\nphysics: {nu: 0.1, forcing: {kind: none}}\nsolver: {pencils: [1, 8]}\n")
    proc = _daskflow("validate", str(bad))
    assert proc.returncode == 2 and "config solver.pencils" in proc.stderr
    bad.write_text("grid: {shape: [8, 8, 8]}\nboundaries: {preset: cavity}\n"
                   "physics: {nu: 0.1, forcing: {kind: flow_rate, value: [1, 0]}}\n")
    proc = _daskflow("validate", str(bad))
    assert proc.returncode == 2 and "physics.forcing.kind" in proc.stderr


BROKEN = {
    "unknown key": ("grid: {shape: [8, 8, 8], size: 3}\n", "grid.size"),
    "unknown section": ("gird: {shape: [8, 8, 8]}\n", "gird"),
    "wrong type": ("grid: {shape: eight}\n", "grid.shape"),
    "negative size": ("grid: {shape: [8, -8, 8]}\n", "grid.shape"),
    "negative length": ("grid: {shape: [8, 8, 8], lengths: [1, 0, 1]}\n", "grid.lengths"),
    "impossible bc": ("boundaries: {preset: channel, u: {z: PN}}\n", "boundaries.u.z"),
    "half periodic": ("grid: {shape: [8, 8, 8]}\nphysics: {nu: 0.1, forcing: {kind: none}}\n"
                      "boundaries: {preset: channel, u: {x: DD}}\n", "axis x"),
    "too many pencils": ("grid: {shape: [8, 8, 8]}\nphysics: {nu: 0.1, forcing: {kind: none}}\n"
                         "solver: {pencils: [9, 1]}\n", "solver.pencils"),
    "thin ptdma chunks": ("grid: {shape: [8, 8, 8]}\nphysics: {nu: 0.1, forcing: {kind: none}}\n"
                          "solver: {pencils: [1, 8]}\n", "solver.pencils"),
    "missing nu": ("physics: {nu: null}\n", "physics.nu"),
    "bad method": ("solver: {poisson: cg}\n", "solver.poisson"),
    "bad implicit": ("time: {implicit_diffusion: y}\n", "time.implicit_diffusion"),
    "endless run": ("time: {steps: null, end_time: null}\n", "time.steps"),
    "forcing without periodic x": ("grid: {shape: [8, 8, 8]}\nboundaries: {preset: cavity}\n"
                                   "physics: {nu: 0.1, forcing: {kind: flow_rate, value: [1, 0]}}\n",
                                   "physics.forcing.kind"),
    "unwritable store": ("grid: {shape: [8, 8, 8]}\nphysics: {nu: 0.1, forcing: {kind: none}}\n"
                         "output: {store: /proc/daskflow/run.zarr}\n", "output.store"),
    "bad cluster": ("cluster: {kind: kubernetes}\n", "cluster.kind"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
@pytest.mark.parametrize("command", ["validate", "run"])
def test_broken_configs_fail_cleanly_before_anything_starts(tmp_path, name, command):
    text, setting = BROKEN[name]
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    proc = _daskflow(command, str(path), cwd=tmp_path)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip() and "WARNING" not in line]
    assert len(lines) == 1 and setting in lines[0], proc.stderr
    assert "dashboard" not in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.yaml"]  # nothing written


def test_a_negative_report_every_is_refused_before_anything_starts(tmp_path):
    config = _small_config(tmp_path, steps=2)
    proc = _daskflow("run", str(config), "--report-every", "-3", cwd=tmp_path)
    assert proc.returncode != 0 and "--report-every -3" in proc.stderr and "positive" in proc.stderr, proc.stderr
    assert "dashboard" not in proc.stderr and not (tmp_path / "run.zarr").exists()


def test_restart_without_a_checkpoint_is_refused_before_anything_starts(tmp_path):
    config = _small_config(tmp_path, steps=2)
    proc = _daskflow("run", str(config), "--restart", cwd=tmp_path)
    assert proc.returncode == 2 and "no complete checkpoint" in proc.stderr and "dashboard" not in proc.stderr


def test_run_against_a_scheduler_address(tmp_path):
    from distributed import LocalCluster

    config = _small_config(tmp_path, steps=4)
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster:
        proc = _daskflow("run", str(config), "--cluster", cluster.scheduler_address, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "2 workers" in proc.stderr
        assert cluster.scheduler.transition_counter > 0  # the run's tasks went to this scheduler


def test_progress_line_and_blow_up_stop(tmp_path):
    config = _small_config(tmp_path, steps=4)
    proc = _daskflow("run", str(config), "--cluster", "none", "--report-every", "2", cwd=tmp_path)
    assert proc.returncode == 0 and "CFL" in proc.stderr and "Re_tau" in proc.stderr and "ETA" in proc.stderr
    cfg = yaml.safe_load(config.read_text())
    cfg["time"].update(dt=5.0, cfl=0.5)  # a fixed dt far beyond the CFL limit
    cfg["output"]["store"] = str(tmp_path / "blow.zarr")
    path = tmp_path / "blow.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = _daskflow("run", str(path), "--cluster", "none", "--report-every", "1", cwd=tmp_path)
    assert proc.returncode == 1 and "blew up at step 1" in proc.stderr


def test_local_workers_keep_freed_memory():
    """The workers daskflow starts run with the allocator settings of ``cluster.WORKER_MALLOC`` (not
    distributed's trim-at-once default, which makes every temporary page-fault), and the caller's
    dask config is left as it was."""
    import os

    import dask
    import distributed  # noqa: F401 - its config defaults

    from daskflow import cluster
    from daskflow.config import DEFAULTS
    from daskflow.run_config import ClusterConfig

    section = ClusterConfig.from_dict({**DEFAULTS["cluster"], "kind": "local", "dashboard_address": None})
    os.environ["MALLOC_TRIM_THRESHOLD_"] = "65536"  # what an earlier cluster's nanny leaves behind
    before = dask.config.get("distributed.nanny.pre-spawn-environ")
    try:
        with cluster.start(section, 1) as client:
            seen = client.run(lambda: {k: os.environ.get(k) for k in cluster.WORKER_MALLOC})
        assert list(seen.values()) == [cluster.WORKER_MALLOC]
        assert dask.config.get("distributed.nanny.pre-spawn-environ") == before
        assert os.environ["MALLOC_TRIM_THRESHOLD_"] == "65536"
    finally:
        os.environ.pop("MALLOC_TRIM_THRESHOLD_")


def test_workers_of_an_owned_cluster_ignore_group_signals_also_after_a_restart():
    """The embedded cluster's workers ignore SIGINT/SIGTERM (the owner stops them), and so do the
    workers the nannies start again later; this process's own handlers are untouched."""
    import signal

    from daskflow import cluster
    from daskflow.config import DEFAULTS
    from daskflow.run_config import ClusterConfig

    def handlers():
        return tuple(int(signal.getsignal(s)) if isinstance(signal.getsignal(s), int) else -1
                     for s in (signal.SIGINT, signal.SIGTERM))

    ignored = (int(signal.SIG_IGN),) * 2
    mine = handlers()
    section = ClusterConfig.from_dict({**DEFAULTS["cluster"], "kind": "local", "dashboard_address": None})
    with cluster.start(section, 1) as client:
        before = client.run(handlers)
        pids = client.run(os.getpid)
        client.restart()
        assert client.run(os.getpid) != pids  # a new worker process
        after = client.run(handlers)
    assert list(before.values()) == [ignored] and list(after.values()) == [ignored]
    assert handlers() == mine


def test_exported_malloc_variables_reach_nanny_workers(monkeypatch):
    """What the job scripts rely on: variables exported before the nanny starts reach its worker
    (distributed's own MALLOC_TRIM_THRESHOLD_ default does not override them)."""
    import os

    from distributed import Client, LocalCluster

    from daskflow import cluster

    for name, value in cluster.WORKER_MALLOC.items():
        monkeypatch.setenv(name, value)
    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None) as c, Client(c) as client:
        seen = client.run(lambda: {k: os.environ.get(k) for k in cluster.WORKER_MALLOC})
    assert list(seen.values()) == [cluster.WORKER_MALLOC]


def test_slurm_batch_script_forwards_the_walltime_signal_and_waits_for_the_checkpoint(tmp_path):
    """``deploy/slurm-batch.sh`` with stand-ins for ``dask``, ``srun`` and ``daskflow``: SLURM's TERM
    to the batch shell reaches the run, and the script waits until the run has written its checkpoint
    (here: a marker written a second after the signal), also through a second TERM, and exits with the
    run's status."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_ins = {
        "dask": 'for a in "$@"; do [ "$prev" = --scheduler-file ] && echo {} > "$a"; prev=$a; done; sleep 60',
        "srun": "sleep 60",
        "daskflow": f'trap \'sleep 1; echo checkpoint > "{tmp_path}/marker"; exit 0\' TERM\n'
                    f'echo started > "{tmp_path}/started"\nwhile true; do sleep 0.1; done',
    }
    for name, body in stand_ins.items():
        (bin_dir / name).write_text(f"#!/usr/bin/env bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_SUBMIT_DIR": str(tmp_path),
           "SLURM_JOB_ID": "1"}
    script = EXAMPLES.parent / "deploy" / "slurm-batch.sh"
    proc = subprocess.Popen(["bash", str(script), "run.yaml"], env=env, cwd=tmp_path, start_new_session=True)
    deadline = time.time() + 30
    while time.time() < deadline and not (tmp_path / "started").exists():
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)  # --signal=B:TERM: the batch shell only
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)  # a second one while the run is writing its checkpoint
    try:
        assert proc.wait(timeout=30) == 0
        assert (tmp_path / "marker").read_text().strip() == "checkpoint"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the stand-in scheduler and workers


def test_the_dashboard_link_of_the_embedded_cluster_serves_the_dashboard():
    """The link every run prints opens Dask's dashboard (its status page), not the page that says
    Dask needs bokeh; over HTTPS with the embedded cluster's temporary certificate."""
    import ssl
    import urllib.request

    from daskflow import cluster
    from daskflow.config import DEFAULTS
    from daskflow.run_config import ClusterConfig

    section = ClusterConfig.from_dict({**DEFAULTS["cluster"], "kind": "local", "dashboard_address": "127.0.0.1:0"})
    with cluster.start(section, 1) as client:
        assert client.dashboard_link.startswith("https://")
        context = ssl.create_default_context(cadata=client.security.tls_ca_file)  # the cluster's temporary CA
        context.check_hostname = False  # its certificate names dask-internal, not the loopback address
        with urllib.request.urlopen(client.dashboard_link, timeout=60, context=context) as response:
            page = response.read().decode(errors="replace")
    assert response.status == 200 and "bokeh" in page.lower() and "needs bokeh" not in page.lower()


def test_validate_prints_the_resolved_configuration_and_the_memory_it_needs():
    proc = _daskflow("validate", "channel-small")  # a shipped example, by name
    assert proc.returncode == 0, proc.stderr
    header, body = proc.stdout.split("\n", 1)
    assert "valid" in header and "# memory: about" in body and "per worker" in body
    resolved = yaml.safe_load(body)
    assert resolved["grid"]["shape"] == [48, 32, 32] and resolved["cluster"]["comm"] == "auto"  # defaults filled


def test_a_misspelled_key_gets_a_suggestion_and_the_version_is_reported():
    from daskflow import __version__
    from daskflow.config import load

    with pytest.raises(ValueError, match=r"config grid.shpe: unknown key \(did you mean 'shape'\?"):
        load({"grid": {"shpe": [8, 8, 8]}})
    proc = _daskflow("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"daskflow {__version__}"


def test_pencils_auto_puts_a_grid_that_fits_one_gpu_on_one_gpu_worker(monkeypatch):
    """On a GPU host ``solver.pencils: auto`` starts one GPU worker when the grid's step fits one GPU
    (pencils would only add exchanges), every GPU when it does not, and what the configuration asks
    for whenever it asks (pencils or ``cluster.workers``)."""
    from daskflow.runner import execute

    example = yaml.safe_load((EXAMPLES / "channel-small.yaml").read_text())

    def workers(**sections) -> int:
        return execute._workers(config.load({**example, **sections}), restart=False)

    monkeypatch.setattr(execute, "uses_local_gpus", lambda section: True)
    monkeypatch.setattr(execute, "default_workers", lambda section: 4)  # a 4-GPU host
    monkeypatch.setattr(execute, "gpu_memory", lambda: 80 * 2**30)
    assert example["solver"]["pencils"] == "auto" and workers() == 1
    beyond = {"pencils": "auto", "max_memory_fraction": None}  # 1024 x 1024 x 512 at 190 B/pt: 104 GB
    assert workers(grid={**example["grid"], "shape": [1024, 1024, 512]}, solver=beyond) == 4
    assert workers(cluster={"workers": 2}) == 2
    assert workers(solver={"pencils": [1, 2]}) == 2
    monkeypatch.setattr(execute, "uses_local_gpus", lambda section: False)  # a CPU host: a worker per core
    assert workers() == 4


def test_run_segments_last_about_two_seconds_unless_report_every_fixes_them():
    """A fast host does not pay a segment's fixed cost every few steps: the next segment is sized to
    the rate just measured, changing at most fourfold at a time; ``--report-every`` fixes it."""
    from daskflow.runner.progress import Segments

    segments = Segments(20)
    for steps, seconds, expected in ((20, 0.2, 80), (80, 0.8, 200), (200, 8.0, 50), (50, 100.0, 12), (12, 0.0, 12)):
        segments.done(steps, seconds)
        assert segments.steps == expected
    fixed = Segments(5, fixed=True)
    fixed.done(5, 0.001)
    assert fixed.steps == 5 and Segments(0).steps == 1
