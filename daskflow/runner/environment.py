"""``daskflow info``: what this machine offers a run (versions, GPUs, NCCL and UCX, the cluster a run
starts by default and the exchanges it would use)."""

from __future__ import annotations

import importlib.util
import json
import platform


def info(args) -> int:
    """Print, as JSON, the versions, GPUs, NCCL and UCX of this machine and what a run would use."""
    from daskflow import settings
    from daskflow.backend import compiled_loops, cupy_or_none, device_name
    from daskflow.cluster import protocol_for
    from daskflow.config import DEFAULTS
    from daskflow.pencils import copy_engine, ipc, nccl, ucx
    from daskflow.run_config import ClusterConfig
    from daskflow.version import __version__

    cp = cupy_or_none()
    versions = {name: _version(name) for name in ("dask", "distributed", "numpy", "numba", "zarr", "xarray", "cupy",
                                                   "dask_cuda", "distributed_ucxx")}
    versions["nccl"] = nccl.version()
    versions["ucx"] = ucx.version()
    cuda_cluster = cp is not None and importlib.util.find_spec("dask_cuda") is not None
    gpus = cp.cuda.runtime.getDeviceCount() if cp else 0
    # the backends cluster.comm: auto times for a run on several workers of this machine (the fastest
    # carries the run), the one it takes untimed (one candidate), and Dask's comms then
    candidates = [*(["nccl"] if cuda_cluster and gpus > 1 and nccl.available() else []),
                  *(["ucx"] if ucx.available() else []), "mailbox"]
    comm = "nccl" if "nccl" in candidates else "mailbox"
    protocol = protocol_for(ClusterConfig.from_dict(DEFAULTS["cluster"]), cuda_cluster)
    print(json.dumps({"daskflow": __version__, "python": platform.python_version(), "versions": versions,
                      "gpus": gpus, "gpu": device_name(cp) if cp else None,
                      "ucx": importlib.util.find_spec("distributed_ucxx") is not None,
                      "nccl": versions["nccl"] is not None,
                      # transposes on the copy engines: which transports this host has, which the key asks for
                      "copy_engine": {"nccl_available": copy_engine.available(), "ipc_available": ipc.available(),
                                      "setting": settings.get("copy-engine")},
                      "compiled_cpu_loops": compiled_loops(),
                      # steps replayed from CUDA graphs: one pencil up to this many points; pencils over NCCL
                      "cuda_graphs": {"one_pencil_points": int(settings.get("cuda-graph-points")),
                                      "pencils": settings.get("distributed-cuda-graphs"),
                                      "points_per_pencil": int(settings.get("distributed-cuda-graph-points"))},
                      # z slabs of a transpose over NCCL: in a captured step of pencils, and elsewhere
                      "transpose_slabs": {"captured_step": int(settings.get("step-transpose-slabs")),
                                          "otherwise": int(settings.get("transpose-slabs"))},
                      # how soon Dask's control messages leave while pencils run (distributed: 2-10 ms)
                      "control_interval_s": settings.get("control-interval"),
                      # whether the ucx transport's endpoints ask UCX to report a failed peer (UCX then
                      # leaves out shared memory and the other transports that cannot)
                      "ucx_error_handling": settings.get("ucx-error-handling"),
                      "default_cluster": f"LocalCUDACluster ({protocol.upper()})" if cuda_cluster else "LocalCluster",
                      "exchanges": comm, "exchange_candidates": candidates}, indent=2))
    return 0


def _version(module: str) -> str | None:
    """The installed version of the distribution that provides ``module`` (``cupy`` comes from
    ``cupy-cuda13x`` or ``cupy-cuda12x``, ``distributed_ucxx`` from ``distributed-ucxx-cu13``), or
    None when it is not installed."""
    from importlib import metadata

    for distribution in metadata.packages_distributions().get(module, [module.replace("_", "-")]):
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return None
