"""Clusters for a run, from the ``cluster`` configuration section.

``kind``: ``auto`` (the embedded default: a ``LocalCUDACluster`` when GPUs and dask-cuda are present,
else a ``LocalCluster``), ``none`` (in process), ``local``, ``local-cuda``, ``slurm`` and ``pbs``
(dask-jobqueue, dask-cuda GPU workers), ``address`` (a running scheduler) or ``scheduler-file`` (a
scheduler started in the same allocation, see ``deploy/``). Every worker count defaults to one worker
per pencil (with ``solver.pencils: auto``: :func:`default_workers`).

Security. Whoever reaches a Dask scheduler can run code on its workers, and on a shared host every
user reaches its loopback ports. ``cluster.tls`` decides (:func:`security_for`):

- ``null`` (the default): the embedded cluster (``auto``, ``local``, ``local-cuda``) uses TLS with a
  temporary self-signed certificate (``Security.temporary()``, held in memory by this process, its
  client and its workers), so only this process's client and workers are let in; clusters found or
  submitted elsewhere (``address``, ``scheduler-file``, ``slurm``, ``pbs``) get no certificates.
- ``{ca_file, cert, key}`` (PEM files): TLS with these files for every kind; a client or worker
  without a certificate of that CA is refused. ``daskflow jobscript`` puts them on the worker command.
- ``false``: plain TCP (or UCX), asked for explicitly, no warning.

UCX cannot carry TLS. ``protocol: auto`` therefore takes TLS whenever there are certificates (and
the pencils of a GPU run without NCCL then travel over TLS instead of UCX); UCX is used only with
``cluster.tls: false`` (``auto`` picks it as before) or where ``cluster.protocol`` names it. An
embedded cluster with ``protocol: ucx`` or ``tcp`` named and ``tls`` left at its default runs
unsecured, with a warning that says so; ``protocol: ucx`` or ``tcp`` with ``tls`` files is a
configuration error, and so is ``protocol: tls`` with ``tls: false``.

Dashboards bind to ``cluster.dashboard_address`` (``127.0.0.1:0`` by default); the workers of the
embedded cluster serve their HTTP endpoints (``/metrics``, ``/health``) on their own address, which
is loopback too. With TLS every one of these HTTP servers this process starts (the scheduler's in
this process, the workers' through their nannies' configuration) serves HTTPS only, with the
cluster's certificate: a temporary one is written for them into a private directory (mode 0700)
that is removed when the cluster closes. The certificate names ``dask-internal``, so a browser asks
once before it opens the dashboard link. HTTPS keeps the pages private on the wire; it does not ask
the browser for a certificate, so any local user can still read the dashboard (not run code).
Pencil exchanges that bypass Dask's comms (NCCL, ``cluster.comm: ucx``) are not covered by TLS.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import warnings

from daskflow.backend import cupy_or_none
from daskflow.run_config import ClusterConfig

#: glibc allocator settings for the worker processes daskflow starts. distributed starts every
#: worker with ``MALLOC_TRIM_THRESHOLD_=65536`` (give freed memory back to the OS at once), which
#: also switches off glibc's adaptive mmap threshold: every field-sized temporary of a time step is
#: then a fresh ``mmap`` that page-faults on first touch. A time step reuses the same few dozen
#: field-sized blocks, so the workers keep them (blocks up to 32 MiB from the heap, freed memory
#: kept up to 1 GiB). Measured on a 2-core Xeon, 128 x 64 x 64 channel, explicit diffusion: one
#: worker 131 -> 73 ms per step, two workers 152 -> 81-84 ms (in process: 61 ms).
WORKER_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


@contextlib.contextmanager
def worker_environment():
    """Local workers (their nannies) created inside start with :data:`WORKER_MALLOC`; the process's
    environment and dask config are restored afterwards. Both are set because a nanny takes these
    variables from the environment first and from its config second, and every nanny writes its own
    values into the environment of the process that starts it (so an earlier cluster would win)."""
    import os

    import dask
    import distributed  # noqa: F401 - loads distributed's config defaults

    key = "distributed.nanny.pre-spawn-environ"
    saved = {name: os.environ.get(name) for name in WORKER_MALLOC}
    os.environ.update(WORKER_MALLOC)
    try:
        with dask.config.set({key: {**dask.config.get(key, {}), **WORKER_MALLOC}}):
            yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def ignore_group_signals(client) -> None:
    """Make the workers of a cluster this process owns ignore SIGINT and SIGTERM, the ones running
    now and every one started later (a replacement after a worker loss, ``client.restart()``).

    Ctrl-C in a terminal or Jupyter, ``timeout`` and a batch system at the walltime signal the
    whole process group. Workers that died of it would take the run's state with them; ignoring it
    leaves the decision to the owner, which finishes its segment, writes a checkpoint and closes the
    cluster (nannies stop their workers through their own queue, then by SIGKILL, and a worker
    exits when its nanny's process is gone, so nothing is left behind). Not for clusters started
    elsewhere (``address``, ``scheduler-file``, batch jobs): their workers follow their own owner."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class IgnoreGroupSignals(WorkerPlugin):
        name = "daskflow-ignore-group-signals"

        def setup(self, worker) -> None:
            import signal
            import threading

            if threading.current_thread() is threading.main_thread():  # the worker's event loop
                for sig in (signal.SIGINT, signal.SIGTERM):
                    signal.signal(sig, signal.SIG_IGN)

    client.register_plugin(IgnoreGroupSignals(), name=IgnoreGroupSignals.name)


def _worker_prologue() -> list[str]:
    """Shell lines giving batch-job workers :data:`WORKER_MALLOC`: exported as they are (a nanny
    prefers a variable already in its environment to its config, and Dask's ``DASK_*`` config
    variables would arrive lower-cased, which glibc ignores)."""
    return [f"export {name}={value}" for name, value in WORKER_MALLOC.items()]


EMBEDDED = ("auto", "local", "local-cuda")  # the kinds whose whole cluster this process starts and owns


def security_for(section: ClusterConfig, protocol: str | None = None):
    """The ``distributed.Security`` of a cluster (``None``: no TLS), see the module docstring.
    ``protocol``: what :func:`protocol_for` chose for a cluster daskflow starts (``None`` for one it
    connects to)."""
    from distributed.security import Security

    tls = section.tls
    if tls:
        return Security(tls_ca_file=tls.ca_file, tls_client_cert=tls.cert, tls_client_key=tls.key,
                        tls_scheduler_cert=tls.cert, tls_scheduler_key=tls.key, tls_worker_cert=tls.cert,
                        tls_worker_key=tls.key, require_encryption=True)
    if protocol != "tls":
        return None
    if tls is None and section.kind in EMBEDDED:
        return Security.temporary()  # needs cryptography (a dependency)
    raise ValueError(f"config cluster.protocol: 'tls' for cluster.kind {section.kind!r} needs cluster.tls "
                     "(ca_file, cert, key)")


def protocol_for(section: ClusterConfig, gpu: bool) -> str:
    """Dask's own comms: ``cluster.protocol``, or for ``auto`` TLS where there are certificates (files in
    ``cluster.tls``, or the embedded cluster's temporary one), else UCX only where pencils travel
    through Dask's comms (GPU workers with ``cluster.comm: mailbox``). With NCCL exchanges Dask carries
    only control messages, and UCX's progress loop then costs the GPU tasks the GIL: a (4, 1) channel
    step over NCCL took 75 ms with TCP and 119 ms with UCX on 4 x H100 (``docs/performance.md``)."""
    protocol, tls = section.protocol, section.tls
    if protocol != "auto":
        if tls and protocol != "tls":
            raise ValueError(f"config cluster.protocol: {protocol!r} cannot carry TLS, which cluster.tls asks for; "
                             "use tls or auto (or cluster.tls: false)")
        if tls is False and protocol == "tls":
            raise ValueError("config cluster.protocol: 'tls' contradicts cluster.tls: false")
        return protocol
    if tls or (tls is None and section.kind in EMBEDDED):
        return "tls"
    from daskflow.pencils import nccl

    comm = section.comm
    pencils_through_dask = comm == "mailbox" or (comm == "auto" and nccl.version() is None)
    return "ucx" if gpu and pencils_through_dask and importlib.util.find_spec("distributed_ucxx") else "tcp"


def _warn_if_unsecured(section: ClusterConfig, protocol: str) -> None:
    """An embedded cluster without TLS that the configuration did not ask for in so many words."""
    if section.kind in EMBEDDED and section.tls is None and protocol != "tls":
        warnings.warn(f"daskflow: cluster.protocol {protocol} carries no TLS: any user of this host can connect to "
                      "the embedded cluster and run code on its workers. cluster.protocol auto or tls secures it; "
                      "cluster.tls: false runs it unsecured without this warning", UserWarning, stacklevel=4)


DASHBOARD_TLS = "distributed.scheduler.dashboard.tls"  # read by every HTTP server distributed starts


@contextlib.contextmanager
def https_dashboards(section: ClusterConfig, security):
    """While open, the HTTP servers distributed starts in this process (the scheduler's dashboard) and in
    the worker processes of nannies created here (``/metrics``, ``/health``, a worker's dashboard) serve
    HTTPS only, with the cluster's certificate, and ``dashboard_link`` says ``https``. A temporary
    certificate is written for them into a private directory, removed on exit. Nothing without TLS."""
    if security is None:
        yield
        return
    import shutil
    import tempfile

    import dask

    tls = section.tls
    directory = None
    try:
        if tls:
            cert, key = tls.cert, tls.key
        else:
            directory = tempfile.mkdtemp(prefix="daskflow-tls-")  # mode 0700
            cert, key = (_write_private(directory, name, text) for name, text in
                         (("cert.pem", security.tls_scheduler_cert), ("key.pem", security.tls_scheduler_key)))
        with dask.config.set({f"{DASHBOARD_TLS}.cert": cert, f"{DASHBOARD_TLS}.key": key}):
            yield
    finally:
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


def _write_private(directory: str, name: str, text: str) -> str:
    import os

    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(text)
    return path


def _jobqueue_kwargs(section: ClusterConfig, kind: str) -> dict:
    """dask-jobqueue arguments: one dask-cuda worker per GPU of each node, Dask's comms on
    :func:`protocol_for` (TLS with ``cluster.tls`` files, whose security dask-jobqueue puts on the
    worker command)."""
    gpus = section.gpus_per_node
    prologue = _worker_prologue()
    if section.tls:  # the workers' HTTP endpoints over HTTPS too (Dask reads DASK_* config variables)
        import shlex

        prologue += [f"export DASK_{DASHBOARD_TLS.upper().replace('.', '__')}__{part.upper()}="
                     f"{shlex.quote(getattr(section.tls, part))}" for part in ("cert", "key")]
    kwargs = {"queue": section.queue, "account": section.account, "walltime": section.walltime,
              "cores": section.cores, "memory": section.memory, "processes": gpus,
              "job_extra_directives": list(section.job_extra_directives),
              "job_script_prologue": prologue,
              "worker_command": "dask_cuda.cli",
              "protocol": protocol_for(section, True),
              "scheduler_options": {"dashboard_address": section.dashboard_address}}
    if kind == "slurm":
        kwargs["job_extra_directives"] = [f"--gpus-per-node={gpus}", *kwargs["job_extra_directives"]]
    else:
        kwargs["resource_spec"] = f"select=1:ncpus={section.cores}:ngpus={gpus}"
    return {k: v for k, v in kwargs.items() if v is not None}


def job_script(section: ClusterConfig, scheduler_file: str | None = None, config: str = "CONFIG") -> str:
    """The batch script of one node of workers for a ``slurm`` or ``pbs`` cluster section (nothing is
    started or submitted), as dask-jobqueue writes it; with ``cluster.tls`` files its worker command
    carries ``--tls-ca-file``, ``--tls-cert`` and ``--tls-key``.

    A scheduler's address exists only once it runs (``daskflow run`` starts one and submits this
    script with it), so the script names a real one: ``cluster.address`` when set (its protocol must
    be the workers' ``--protocol``), else the scheduler file ``cluster.scheduler_file`` or
    ``scheduler_file``, which a scheduler started with the same protocol writes; comments at the top
    of the script say how to start that scheduler and the run (``config``: the configuration's
    path). Without either, the address is the placeholder ``PROTOCOL://SCHEDULER-ADDRESS:8786``
    (of the workers' protocol) that ``daskflow run`` replaces."""
    import shlex

    kind = section.kind
    if kind not in ("slurm", "pbs"):
        raise ValueError(f"config cluster.kind: job scripts exist for slurm and pbs, got {kind!r} (daskflow jobscript "
                         "CONFIG --kind slurm|pbs chooses one)")
    if importlib.util.find_spec("dask_jobqueue") is None:
        raise ValueError("cluster.kind slurm/pbs needs dask-jobqueue (pip install 'daskflow[hpc]')")
    from dask_jobqueue.pbs import PBSJob
    from dask_jobqueue.slurm import SLURMJob

    job = {"slurm": SLURMJob, "pbs": PBSJob}[kind]
    kwargs = _jobqueue_kwargs(section, kind)
    kwargs.pop("scheduler_options")
    protocol = kwargs["protocol"]
    security = security_for(section, protocol)
    tls = section.tls
    tls_options = "".join(f" --tls-{option} {shlex.quote(getattr(tls, part))}" for option, part in
                          (("ca-file", "ca_file"), ("cert", "cert"), ("key", "key")) if tls)
    address = section.address
    if address:
        scheme = address.split("://", 1)[0] if "://" in address else None
        if scheme is not None and scheme != protocol:
            raise ValueError(f"config cluster.address: {address!r} is a {scheme} address, but the workers talk "
                             f"{protocol} (cluster.protocol {section.protocol!r} with cluster.tls "
                             f"{section.to_dict()['tls']!r}); give an address of the workers' protocol")
        scheduler = address if scheme else f"{protocol}://{address}"
        notes = [f"# Dask workers for daskflow, joining the scheduler at {scheduler} (cluster.address); then run",
                 f"#   daskflow run {shlex.quote(config)} --cluster {scheduler}"]
    else:
        path = section.scheduler_file or scheduler_file
        if not path:  # what daskflow run fills in when it submits the script
            return job(scheduler=f"{protocol}://SCHEDULER-ADDRESS:8786", name="daskflow-worker", security=security,
                       **kwargs).job_script()
        quoted = shlex.quote(path)
        scheduler = f"--scheduler-file {quoted}"
        notes = [f"# Dask workers for daskflow. They join the scheduler whose address {quoted} holds:",
                 "# start it first, with the workers' protocol, on a host they reach, then the run:",
                 f"#   dask scheduler --scheduler-file {quoted} --protocol {protocol}{tls_options}",
                 f"#   daskflow run {shlex.quote(config)} --cluster scheduler-file:{quoted}"]
    kwargs["job_script_prologue"] = [*notes, *kwargs["job_script_prologue"]]
    return job(scheduler=scheduler, name="daskflow-worker", security=security, **kwargs).job_script()


DEFAULT_CPU_WORKERS = 8  # at most this many CPU workers for pencils: auto (one per core below that)


def uses_local_gpus(section: ClusterConfig) -> bool:
    """Whether this cluster section starts dask-cuda GPU workers on this host."""
    kind = section.kind
    return kind == "local-cuda" or (kind == "auto" and cupy_or_none() is not None
                                    and importlib.util.find_spec("dask_cuda") is not None)


def default_workers(section: ClusterConfig) -> int:
    """The worker count when the pencils do not give one (``solver.pencils: auto``): ``cluster.workers``
    if set; else every node's GPUs for slurm/pbs, every visible GPU for a local GPU cluster, and one
    worker per CPU core (at most :data:`DEFAULT_CPU_WORKERS`) for a local CPU cluster. ``none`` (in
    process) and clusters found at an address do not use it."""
    import os

    if section.workers:
        return int(section.workers)
    kind = section.kind
    if kind in ("slurm", "pbs"):
        return section.nodes * section.gpus_per_node
    if kind in ("none", "address", "scheduler-file"):
        return 1
    if uses_local_gpus(section):
        try:  # what LocalCUDACluster itself counts (NVML, CUDA_VISIBLE_DEVICES respected), no CUDA context here
            from dask_cuda.utils import get_n_gpus

            return int(get_n_gpus())
        except Exception:  # noqa: BLE001 - no dask-cuda or no NVML: ask the CUDA runtime
            cupy = cupy_or_none()
            if cupy is not None:
                return int(cupy.cuda.runtime.getDeviceCount())
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, DEFAULT_CPU_WORKERS))


def gpu_memory() -> int | None:
    """Total memory in bytes of the smallest GPU a local GPU cluster would use (``None`` without
    one), read through NVML as dask-cuda does, so that no CUDA context is made in this process."""
    try:
        from dask_cuda.utils import get_device_total_memory, get_n_gpus

        return min(int(get_device_total_memory(i)) for i in range(get_n_gpus())) or None
    except Exception:  # noqa: BLE001 - no dask-cuda or no NVML: ask the CUDA runtime
        cupy = cupy_or_none()
        if cupy is None:
            return None
        count = cupy.cuda.runtime.getDeviceCount()
        return min(int(cupy.cuda.runtime.getDeviceProperties(i)["totalGlobalMem"]) for i in range(count)) or None


def shared_gpu_cluster_class():
    """dask-cuda's ``LocalCUDACluster`` whose workers may outnumber the GPUs (more pencils than GPUs):
    worker ``i`` gets GPU ``i mod n``, set up exactly as dask-cuda sets up a worker of that GPU. Its
    first ``n`` workers are dask-cuda's own. Workers that share a GPU exchange through the mailbox,
    not NCCL (one rank per GPU)."""
    from dask_cuda import LocalCUDACluster

    class SharedGPUCluster(LocalCUDACluster):
        def new_worker_spec(self):
            devices = list(self.cuda_visible_devices)
            index = len(self.worker_spec)
            if index < len(devices):
                return super().new_worker_spec()
            device = devices[index % len(devices)]
            taken = self.worker_spec
            self.worker_spec = {d: None for d in devices if d != device}  # the parent picks the one free GPU
            try:
                ((name, spec),) = super().new_worker_spec().items()
            finally:
                self.worker_spec = taken
            return {f"{name}-{index // len(devices)}": spec}

    return SharedGPUCluster


def send_worker_output(client, path: str) -> None:
    """Make every worker of ``client``, those running now and any started later, write its standard
    error (Dask's log messages, Python warnings, tracebacks of failed tasks) to the end of the file
    ``path`` instead of the terminal an embedded cluster shares with the command (:func:`start`)."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class WorkerOutput(WorkerPlugin):
        name = "daskflow-worker-output"

        def __init__(self, path: str) -> None:
            self.path = path

        def setup(self, worker) -> None:
            import os
            import sys

            sys.stderr.flush()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.dup2(fd, 2)
            os.close(fd)

    client.register_plugin(WorkerOutput(path), name=WorkerOutput.name)


@contextlib.contextmanager
def start(section: ClusterConfig, workers: int, worker_output: str | None = None, log_level: int = logging.WARNING):
    """A ``distributed.Client`` for the configured cluster (``None`` for ``kind: none``), holding the
    cluster's ``Security`` (``client.security``; the temporary certificate of an embedded cluster).

    The workers of an embedded cluster log at ``log_level`` and, with ``worker_output`` (a file),
    write their standard error there rather than to this process's terminal (:func:`send_worker_output`);
    workers started elsewhere keep their own output."""
    from distributed import Client

    kind = section.kind
    if kind == "none":
        yield None
        return
    if kind in ("address", "scheduler-file"):
        if kind == "address":
            target = {"address": section.address}
        else:
            target = {"scheduler_file": section.scheduler_file}
        with Client(**target, security=security_for(section)) as client:
            yield client
        return
    n = section.workers or workers
    gpu = uses_local_gpus(section)
    protocol = protocol_for(section, gpu or kind in ("slurm", "pbs"))
    security = security_for(section, protocol)
    _warn_if_unsecured(section, protocol)
    with https_dashboards(section, security):
        if kind in ("slurm", "pbs"):
            import dask_jobqueue

            cls = {"slurm": dask_jobqueue.SLURMCluster, "pbs": dask_jobqueue.PBSCluster}[kind]
            cluster = cls(**_jobqueue_kwargs(section, kind), security=security)
            cluster.scale(n)
        elif gpu:

            options = {}
            if section.rmm_pool_size:
                options = {"rmm_pool_size": section.rmm_pool_size, "rmm_allocator_external_lib_list": ["cupy"]}
            with worker_environment():
                cluster = shared_gpu_cluster_class()(n_workers=n, protocol=protocol, security=security,
                                                     dashboard_address=section.dashboard_address,
                                                     silence_logs=log_level, **options)
        else:
            from distributed import LocalCluster

            with worker_environment():
                cluster = LocalCluster(n_workers=n, threads_per_worker=section.threads_per_worker,
                                       protocol=protocol, security=security, silence_logs=log_level,
                                       dashboard_address=section.dashboard_address)
        with cluster, Client(cluster, security=security) as client:
            if kind in ("slurm", "pbs"):
                client.wait_for_workers(n)
            else:
                if worker_output:
                    send_worker_output(client, worker_output)
                ignore_group_signals(client)
            yield client
