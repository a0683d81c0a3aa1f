"""Clusters for a run, from the ``cluster`` configuration section.

``kind``: ``auto`` (the embedded default: a ``LocalCUDACluster`` with UCX when GPUs and dask-cuda
are present, else a ``LocalCluster``), ``none`` (in process), ``local``, ``local-cuda``, ``slurm`` and
``pbs`` (dask-jobqueue, dask-cuda GPU workers), ``address`` (a running scheduler) or
``scheduler-file`` (a scheduler started in the same allocation, see ``deploy/``). Every worker
count defaults to one worker per pencil (with ``solver.pencils: auto``: :func:`default_workers`).
Dashboards bind to localhost unless configured otherwise;
``tls`` (CA, certificate and key files) secures every connection.
"""

from __future__ import annotations

import contextlib
import importlib.util

from daskflow.backend import cupy_or_none

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


def _security(section: dict):
    if not section.get("tls"):
        return None
    from distributed.security import Security

    tls = section["tls"]
    return Security(tls_ca_file=tls["ca_file"], tls_client_cert=tls["cert"], tls_client_key=tls["key"],
                    tls_scheduler_cert=tls["cert"], tls_scheduler_key=tls["key"], tls_worker_cert=tls["cert"],
                    tls_worker_key=tls["key"], require_encryption=True)


def protocol_for(section: dict, gpu: bool) -> str:
    """Dask's own comms: ``cluster.protocol``, or for ``auto`` UCX only where pencils travel through
    them (GPU workers with ``cluster.comm: mailbox``). With NCCL exchanges Dask carries only control
    messages, and UCX's progress loop then costs the GPU tasks the GIL: a (4, 1) channel step over
    NCCL took 75 ms with TCP and 119 ms with UCX on 4 x H100 (``docs/performance.md``)."""
    if section["protocol"] != "auto":
        return section["protocol"]
    if section.get("tls"):
        return "tls"
    from daskflow.pencils import nccl

    comm = section.get("comm", "auto")
    pencils_through_dask = comm == "mailbox" or (comm == "auto" and nccl.version() is None)
    return "ucx" if gpu and pencils_through_dask and importlib.util.find_spec("distributed_ucxx") else "tcp"


def _jobqueue_kwargs(section: dict, kind: str) -> dict:
    """dask-jobqueue arguments: one dask-cuda worker per GPU of each node, UCX between them."""
    gpus = section["gpus_per_node"]
    kwargs = {"queue": section["queue"], "account": section["account"], "walltime": section["walltime"],
              "cores": section["cores"], "memory": section["memory"], "processes": gpus,
              "job_extra_directives": list(section["job_extra_directives"]),
              "job_script_prologue": _worker_prologue(),
              "worker_command": "dask_cuda.cli",
              "protocol": protocol_for(section, True),
              "scheduler_options": {"dashboard_address": section["dashboard_address"]}}
    if kind == "slurm":
        kwargs["job_extra_directives"] = [f"--gpus-per-node={gpus}", *kwargs["job_extra_directives"]]
    else:
        kwargs["resource_spec"] = f"select=1:ncpus={section['cores']}:ngpus={gpus}"
    return {k: v for k, v in kwargs.items() if v is not None}


def job_script(section: dict) -> str:
    """The batch script dask-jobqueue submits for one node of workers (nothing is started)."""
    kind = section["kind"]
    if kind not in ("slurm", "pbs"):
        raise ValueError(f"config cluster.kind: job scripts exist for slurm and pbs, got {kind!r}")
    if importlib.util.find_spec("dask_jobqueue") is None:
        raise ValueError("cluster.kind slurm/pbs needs dask-jobqueue (pip install 'daskflow[hpc]')")
    from dask_jobqueue.pbs import PBSJob
    from dask_jobqueue.slurm import SLURMJob

    job = {"slurm": SLURMJob, "pbs": PBSJob}[kind]
    kwargs = _jobqueue_kwargs(section, kind)
    kwargs.pop("scheduler_options")
    return job(scheduler="tcp://SCHEDULER-ADDRESS:8786", name="daskflow-worker", **kwargs).job_script()


DEFAULT_CPU_WORKERS = 8  # at most this many CPU workers for pencils: auto (one per core below that)


def _uses_gpus(section: dict) -> bool:
    kind = section["kind"]
    return kind == "local-cuda" or (kind == "auto" and cupy_or_none() is not None
                                    and importlib.util.find_spec("dask_cuda") is not None)


def default_workers(section: dict) -> int:
    """The worker count when the pencils do not give one (``solver.pencils: auto``): ``cluster.workers``
    if set; else every node's GPUs for slurm/pbs, every visible GPU for a local GPU cluster, and one
    worker per CPU core (at most :data:`DEFAULT_CPU_WORKERS`) for a local CPU cluster. ``none`` (in
    process) and clusters found at an address do not use it."""
    import os

    if section["workers"]:
        return int(section["workers"])
    kind = section["kind"]
    if kind in ("slurm", "pbs"):
        return section["nodes"] * section["gpus_per_node"]
    if kind in ("none", "address", "scheduler-file"):
        return 1
    if _uses_gpus(section):
        try:  # what LocalCUDACluster itself counts (NVML, CUDA_VISIBLE_DEVICES respected), no CUDA context here
            from dask_cuda.utils import get_n_gpus

            return int(get_n_gpus())
        except Exception:  # noqa: BLE001 - no dask-cuda or no NVML: ask the CUDA runtime
            cupy = cupy_or_none()
            if cupy is not None:
                return int(cupy.cuda.runtime.getDeviceCount())
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, DEFAULT_CPU_WORKERS))


@contextlib.contextmanager
def start(section: dict, workers: int):
    """A ``distributed.Client`` for the configured cluster (``None`` for ``kind: none``)."""
    from distributed import Client

    kind = section["kind"]
    security = _security(section)
    if kind == "none":
        yield None
        return
    if kind in ("address", "scheduler-file"):
        if kind == "address":
            target = {"address": section["address"]}
        else:
            target = {"scheduler_file": section["scheduler_file"]}
        with Client(**target, security=security) as client:
            yield client
        return
    n = section["workers"] or workers
    gpu = _uses_gpus(section)
    if kind in ("slurm", "pbs"):
        import dask_jobqueue

        cls = {"slurm": dask_jobqueue.SLURMCluster, "pbs": dask_jobqueue.PBSCluster}[kind]
        cluster = cls(**_jobqueue_kwargs(section, kind), security=security)
        cluster.scale(n)
    elif gpu:
        from dask_cuda import LocalCUDACluster

        options = {}
        if section["rmm_pool_size"]:
            options = {"rmm_pool_size": section["rmm_pool_size"], "rmm_allocator_external_lib_list": ["cupy"]}
        with worker_environment():
            cluster = LocalCUDACluster(n_workers=n, protocol=protocol_for(section, True), security=security,
                                       dashboard_address=section["dashboard_address"], **options)
    else:
        from distributed import LocalCluster

        with worker_environment():
            cluster = LocalCluster(n_workers=n, threads_per_worker=section["threads_per_worker"],
                                   protocol=protocol_for(section, False), security=security,
                                   dashboard_address=section["dashboard_address"])
    with cluster, Client(cluster, security=security) as client:
        if kind in ("slurm", "pbs"):
            client.wait_for_workers(n)
        else:
            ignore_group_signals(client)
        yield client
