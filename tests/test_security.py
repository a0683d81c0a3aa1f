"""TLS between client, scheduler and workers: the embedded cluster is TLS by default with a temporary
certificate, runs solves and simulations, refuses clients without its certificate and serves its
dashboards over HTTPS only; job scripts carry configured certificates; ``cluster.tls: false`` is plain
TCP."""

import contextlib
import gc
import http.client
import os
import ssl
import stat
import subprocess
import urllib.request
import warnings
from pathlib import Path

import dask
import numpy as np
import psutil
import pytest
from distributed import Client
from distributed.security import Security

from daskflow import PoissonSolver, Simulation, cluster
from daskflow.backend import to_numpy
from daskflow.config import DEFAULTS, load
from daskflow.grid import Grid
from daskflow.poisson.distributed import home_chunks
from daskflow.run_config import ClusterConfig
from tests.helpers import CHANNEL

pytest.importorskip("cryptography")

UNSECURED = "carries no TLS"  # the warning of an embedded cluster without TLS that was not asked for


def _section(**settings) -> ClusterConfig:
    return ClusterConfig.from_dict({**DEFAULTS["cluster"], "kind": "local", **settings})


@contextlib.contextmanager
def _failed_clients_leave_no_default():
    """A Client whose connection fails has already made itself dask's default scheduler and stays so
    until it is garbage collected: later in-process computations in this test session would then ask
    for a client that no longer exists. Restore the setting (each failure is collected by
    :func:`_refused`)."""
    before = dask.config.get("scheduler", None)
    with dask.config.set(scheduler=before):
        yield
    assert dask.config.get("scheduler", None) == before


@contextlib.contextmanager
def _refused(errors, match: str | None = None):
    """``pytest.raises`` around a Client that cannot connect, its remains collected at once. A failed
    Client stays open until the garbage collector finds it, and its ``__del__`` closes it; found while
    the next Client starts (distributed's ``LoopRunner`` holds its class-wide, non-reentrant lock
    then), that close waits for the lock in the same thread, forever."""
    with pytest.raises(errors, match=match):
        yield
    gc.collect()


def _trusting(security: Security) -> ssl.SSLContext:
    """An HTTPS client context that trusts the cluster's CA (the certificate names ``dask-internal``,
    not the loopback address it is served on)."""
    context = ssl.create_default_context(cadata=security.tls_ca_file)
    context.check_hostname = False
    return context


def _get(url: str, context: ssl.SSLContext | None = None) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=60, context=context) as response:
        return response.status, response.read().decode(errors="replace")


def _pem_files(directory: Path) -> dict:
    """``cluster.tls`` for PEM files of a CA-signed certificate (a self-signed one: its own CA)."""
    temporary = Security.temporary()
    files = {}
    for name, text in (("ca_file", temporary.tls_ca_file), ("cert", temporary.tls_worker_cert),
                       ("key", temporary.tls_worker_key)):
        path = directory / f"{name}.pem"
        path.write_text(text)
        files[name] = str(path)
    return files


def _listeners(pids) -> set[tuple[str, int]]:
    found = set()
    for pid in pids:
        process = psutil.Process(pid)
        connections = getattr(process, "net_connections", None) or process.connections  # psutil < 6
        found |= {(c.laddr.ip, c.laddr.port) for c in connections(kind="inet") if c.status == psutil.CONN_LISTEN}
    return found


def test_embedded_cluster_is_tls_by_default_runs_and_refuses_clients_without_its_certificate():
    with cluster.start(_section(dashboard_address=None), 2) as client:
        address = client.scheduler.address
        assert address.startswith("tls://") and client.security.require_encryption
        assert all(w.startswith("tls://") for w in client.scheduler_info()["workers"])
        import dask.array as da

        grid = Grid((8, 8, 8), (1.0, 1.0, 1.0))
        solver = PoissonSolver(grid, ("PP", "PP", "NN"), method="ptdma", pencils=(1, 2), granularity="fused")
        b = np.asfortranarray(np.random.default_rng(0).standard_normal(grid.shape))
        x = solver.solve(da.from_array(b, chunks=home_chunks(solver))).compute()
        np.testing.assert_allclose(x, solver.solve(b), atol=1e-12)
        cfg = {**CHANNEL, "solver": {"pencils": [1, 2]}}
        sim = Simulation(cfg, client=client).run(steps=2)
        np.testing.assert_allclose(to_numpy(sim.u.compute()), to_numpy(Simulation(CHANNEL).run(steps=2).state.u),
                                   atol=1e-12)
        with _failed_clients_leave_no_default():
            with _refused(OSError):  # plain TCP to the TLS listener: the handshake fails
                Client(address.replace("tls://", "tcp://", 1), timeout="3s")
            with _refused(TypeError, match="ssl_context"):
                Client(address, timeout="3s")  # no certificates at all
            with _refused((OSError, TimeoutError)):
                Client(address, security=Security.temporary(), timeout="3s")  # a stranger's CA
        assert client.submit(sum, [1, 2]).result() == 3  # the owner's client is still served


def test_dashboards_of_a_tls_cluster_serve_https_only_on_loopback_and_their_certificate_goes_away():
    before = _listeners([os.getpid()])
    with cluster.start(_section(), 1) as client:
        # every server the cluster opened: in this process (scheduler, its dashboard, the nannies) and
        # in the workers (their comms, their /metrics and /health)
        opened = _listeners([os.getpid(), *client.run(os.getpid).values()]) - before
        assert opened and {host for host, _ in opened} == {"127.0.0.1"}, opened
        link = client.dashboard_link
        assert link.startswith("https://127.0.0.1:")
        cert = dask.config.get(f"{cluster.DASHBOARD_TLS}.cert")
        directory = os.path.dirname(cert)
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(dask.config.get(f"{cluster.DASHBOARD_TLS}.key")).st_mode) == 0o600
        trusted = _trusting(client.security)
        status, page = _get(link, trusted)
        assert status == 200 and "bokeh" in page.lower()
        with pytest.raises((OSError, http.client.HTTPException)):  # refused, reset or unanswered: no page
            _get(link.replace("https://", "http://", 1))
        with pytest.raises(OSError):  # HTTPS that does not trust the cluster's CA
            _get(link)
        for worker in client.scheduler_info()["workers"].values():  # the workers' /metrics and /health
            url = f"https://127.0.0.1:{worker['services']['dashboard']}/health"
            assert _get(url, trusted) == (200, "ok")
            with pytest.raises((OSError, http.client.HTTPException)):
                _get(url.replace("https://", "http://", 1))
    assert not os.path.exists(directory)
    assert dask.config.get(f"{cluster.DASHBOARD_TLS}.cert") is None


def test_tls_false_is_plain_tcp_and_an_explicit_plain_protocol_warns():
    # cluster.tls: false is validated by daskflow.config; the cluster section is given as load returns it
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with cluster.start(_section(tls=False), 1) as client:
            assert client.scheduler.address.startswith("tcp://") and client.dashboard_link.startswith("http://")
            assert client.submit(sum, [1, 2]).result() == 3
    assert not [w for w in seen if UNSECURED in str(w.message)]
    with pytest.warns(UserWarning, match=UNSECURED):
        with cluster.start(_section(protocol="tcp", dashboard_address=None), 1) as client:
            assert client.scheduler.address.startswith("tcp://")


def test_an_embedded_cluster_with_certificate_files_uses_them_for_comms_and_dashboards(tmp_path):
    files = _pem_files(tmp_path)
    with cluster.start(_section(tls=files), 1) as client:
        assert client.scheduler.address.startswith("tls://") and client.security.tls_ca_file == files["ca_file"]
        assert dask.config.get(f"{cluster.DASHBOARD_TLS}.cert") == files["cert"]  # no temporary copy
        context = ssl.create_default_context(cafile=files["ca_file"])
        context.check_hostname = False
        assert _get(client.dashboard_link, context)[0] == 200
        security = Security(tls_ca_file=files["ca_file"], tls_client_cert=files["cert"], tls_client_key=files["key"],
                            require_encryption=True)
        with Client(client.scheduler.address, security=security, timeout="60s") as other:  # a holder of the files
            assert other.submit(sum, [1, 2]).result() == 3
        with _failed_clients_leave_no_default(), _refused((OSError, TimeoutError)):
            Client(client.scheduler.address, security=Security.temporary(), timeout="3s")


def test_protocol_and_certificates_follow_cluster_tls(tmp_path):
    files = {"ca_file": str(tmp_path / "ca.pem"), "cert": str(tmp_path / "cert.pem"), "key": str(tmp_path / "key.pem")}
    assert cluster.protocol_for(_section(), False) == "tls"
    assert cluster.protocol_for(_section(kind="auto"), True) == "tls"  # not UCX: it cannot carry TLS
    assert cluster.security_for(_section(), "tls").require_encryption  # a temporary certificate
    assert cluster.protocol_for(_section(tls=False), False) == "tcp"
    assert cluster.security_for(_section(tls=False), "tcp") is None
    # UCX named by the configuration: unsecured (start warns), and a contradiction with certificate files
    assert cluster.protocol_for(_section(kind="local-cuda", protocol="ucx"), True) == "ucx"
    assert cluster.security_for(_section(kind="local-cuda", protocol="ucx"), "ucx") is None
    with pytest.raises(ValueError, match="cluster.protocol"):
        cluster.protocol_for(_section(protocol="ucx", tls=files), True)
    with pytest.raises(ValueError, match="cluster.protocol"):
        cluster.protocol_for(_section(protocol="tls", tls=False), False)
    # clusters found or submitted elsewhere: certificates only where configured
    for kind in ("slurm", "pbs", "address", "scheduler-file"):
        assert cluster.security_for(_section(kind=kind)) is None
    assert cluster.protocol_for(_section(kind="slurm"), True) in ("tcp", "ucx")
    assert cluster.protocol_for(_section(kind="slurm", tls=files), True) == "tls"
    security = cluster.security_for(_section(kind="address", tls=files))
    assert security.require_encryption and security.tls_ca_file == files["ca_file"]
    with pytest.raises(ValueError, match="cluster.tls"):
        cluster.security_for(_section(kind="slurm", protocol="tls"), "tls")


@pytest.mark.parametrize("kind", ["slurm", "pbs"])
def test_job_script_carries_the_tls_options(tmp_path, kind):
    pytest.importorskip("dask_jobqueue")
    files = _pem_files(tmp_path)
    cfg = load({**CHANNEL, "cluster": {"kind": kind, "tls": files}})
    script = cluster.job_script(cfg.cluster)
    assert "dask_cuda.cli tls://SCHEDULER-ADDRESS:8786" in script and "--protocol tls" in script
    for option, name in (("--tls-ca-file", "ca_file"), ("--tls-cert", "cert"), ("--tls-key", "key")):
        assert f"{option} {files[name]}" in script
    assert f"export DASK_DISTRIBUTED__SCHEDULER__DASHBOARD__TLS__CERT={files['cert']}" in script
    plain = cluster.job_script(load({**CHANNEL, "cluster": {"kind": kind}}).cluster)
    assert "--tls-" not in plain and "tcp://SCHEDULER-ADDRESS" in plain


def test_slurm_batch_script_passes_its_tls_files_to_the_scheduler_and_the_workers(tmp_path):
    """``deploy/slurm-batch.sh`` with stand-ins for ``dask``, ``srun`` and ``daskflow`` that record how
    they were called: with ``TLS_CA_FILE``, ``TLS_CERT`` and ``TLS_KEY`` the scheduler and the workers
    listen on TLS with these files (and serve HTTPS with them); without, plain TCP as before."""
    script = Path(__file__).resolve().parent.parent / "deploy" / "slurm-batch.sh"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = f'echo "$* | ${{DASK_DISTRIBUTED__SCHEDULER__DASHBOARD__TLS__CERT:-}}" >> "{tmp_path}/$(basename $0)"'
    stand_ins = {
        "dask": record + '\nfor a in "$@"; do [ "$prev" = --scheduler-file ] && echo {} > "$a"; prev=$a; done',
        "srun": record,
        "daskflow": record,
    }
    for name, body in stand_ins.items():
        (bin_dir / name).write_text(f"#!/usr/bin/env bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_SUBMIT_DIR": str(tmp_path)}
    files = {"TLS_CA_FILE": "/certs/ca.pem", "TLS_CERT": "/certs/cert.pem", "TLS_KEY": "/certs/key.pem"}
    for job, extra in (("1", files), ("2", {})):
        for name in stand_ins:
            (tmp_path / name).unlink(missing_ok=True)
        proc = subprocess.run(["bash", str(script), "run.yaml"], env={**env, "SLURM_JOB_ID": job, **extra},
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        scheduler, workers = ((tmp_path / name).read_text() for name in ("dask", "srun"))
        assert scheduler.startswith("scheduler ") and "cuda worker" in workers
        assert f"scheduler-file:{tmp_path}/scheduler-{job}.json" in (tmp_path / "daskflow").read_text()
        for line in (scheduler, workers):
            if extra:
                assert "--protocol tls --tls-ca-file /certs/ca.pem --tls-cert /certs/cert.pem " \
                       "--tls-key /certs/key.pem" in line and line.rstrip().endswith("| /certs/cert.pem")
            else:
                assert "--protocol tcp" in line and "--tls" not in line and line.rstrip().endswith("|")
    proc = subprocess.run(["bash", str(script), "run.yaml"], env={**env, "TLS_CERT": "/certs/cert.pem"},
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "go together" in proc.stderr
