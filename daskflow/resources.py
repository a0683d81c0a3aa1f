"""Memory a run needs, estimated from its configuration before anything is allocated.

:func:`check` (called by :func:`daskflow.config.validate`) refuses a ``grid.shape`` whose fields
cannot fit, with the bytes needed and the bytes available; the estimate is arithmetic on the
configuration (nothing is allocated, a ``[100000, 100000, 100000]`` grid is refused at once).

Bytes per grid point, measured with ``tracemalloc`` on the CPU (NumPy path, peak traced memory of
two time steps after set-up, 128 x 64 x 96 channel, stretched z, flow-rate forcing):

- a time step holds at most :data:`STEP_WORDS` = 22 words (values of ``solver.dtype``) per point of
  a pencil including its halo: the fields ``u, v, w, p``, the RK3 history, the padded velocity,
  the explicit terms, the pressure correction and the solvers' work arrays. Measured in process:
  21.3 (explicit diffusion), 16.4 (z-implicit), 17.3 (xyz-implicit), 20.6 words in float32 (some
  coefficient arrays stay float64); on the workers of a 2-worker ``LocalCluster`` 13-15 words.
- implicit diffusion in x, y and z with P-TDMA across z pencils (``pz > 1``) keeps the reduced
  systems' precomputed coefficients of three Helmholtz plans: :data:`PTDMA_XYZ_WORDS` = 40
  (measured 34-39 in process, 28.6 on the workers).
- set-up builds the initial fields on the host of the process that creates the simulation, in
  float64 whatever the dtype, for the whole grid: :data:`SETUP_BYTES` = 106 bytes per point
  (measured 104.5).

What is compared with what:

- every run: the set-up (whole grid) with this host's memory (``psutil.virtual_memory().total``);
- workers on this host (``cluster.kind`` ``none``, ``auto``, ``local``, ``local-cuda``): the time
  steps of all pencils together with this host's memory, unless ``solver.device`` is ``gpu`` (the
  steps then live in GPU memory; ``auto`` is counted, as it runs on the CPU where there is no GPU);
- ``slurm`` / ``pbs``: one pencil's time step with ``cluster.memory / cluster.gpus_per_node`` (the
  memory of one worker of a job);
- ``address`` / ``scheduler-file``: the workers' memory is unknown here; only the set-up is checked.

The budget is ``solver.max_memory_fraction`` (default 0.8) of the memory available; ``null``
switches the check off (the run then finds out itself). GPU memory is not checked here; with
``solver.pencils: auto`` a grid whose step fits one GPU (:func:`fits_one_gpu`) runs on one GPU worker.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daskflow.run_config import RunConfig

GPU_STEP_BYTES = 190  # per point, float64: the most measured on a GPU (129 at 512 x 256 x 144, 189 at 3456 x 3072 x 30)
STEP_WORDS = 22
PTDMA_XYZ_WORDS = 40
SETUP_BYTES = 106
ITEMSIZE = {"float64": 8, "float32": 4}
LOCAL_KINDS = ("none", "auto", "local", "local-cuda")
JOBQUEUE_KINDS = ("slurm", "pbs")


def host_memory() -> int:
    """Total memory of this host in bytes."""
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except ImportError:  # psutil comes with distributed; sysconf is the fallback on POSIX
        import os

        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def _pencils(cfg: RunConfig) -> tuple[int, int]:
    """``solver.pencils``; for ``auto`` y-slabs over the workers the autotuner will have (one in process)."""
    pencils = cfg.solver.pencils
    if pencils != "auto":
        return int(pencils[0]), int(pencils[1])
    c = cfg.cluster
    jobs = c.nodes * c.gpus_per_node if c.kind in JOBQUEUE_KINDS else 1
    return (1, 1) if c.kind == "none" else (int(c.workers or jobs), 1)


def step_words(cfg: RunConfig) -> int:
    """Words per point a time step holds at its peak (see the module docstring)."""
    pz = _pencils(cfg)[1]
    xyz_ptdma = (cfg.time.implicit_diffusion == "xyz" and cfg.solver.poisson != "ftm"
                 and (pz > 1 or cfg.solver.pencils == "auto"))
    return PTDMA_XYZ_WORDS if xyz_ptdma else STEP_WORDS


def pencil_points(shape, pencils) -> int:
    """Points of the largest pencil of ``shape`` split ``(py, pz)``, with one halo layer each side."""
    nx, ny, nz = (int(n) for n in shape)
    py, pz = pencils
    return (nx + 2) * (math.ceil(ny / py) + 2) * (math.ceil(nz / pz) + 2)


def worker_bytes(cfg: RunConfig) -> int:
    """Bytes one worker (one pencil) needs at the peak of a time step."""
    return step_words(cfg) * ITEMSIZE[cfg.solver.dtype] * pencil_points(cfg.grid.shape, _pencils(cfg))


def fits_one_gpu(cfg: RunConfig, gpu_bytes: int | None) -> bool:
    """Whether the whole grid's time step fits one GPU of ``gpu_bytes`` (:data:`GPU_STEP_BYTES` per
    point, scaled by the dtype, within ``solver.max_memory_fraction``, 0.8 when the check is off)."""
    if not gpu_bytes:
        return False
    fraction = cfg.solver.max_memory_fraction or 0.8
    need = GPU_STEP_BYTES * ITEMSIZE[cfg.solver.dtype] / 8 * pencil_points(cfg.grid.shape, (1, 1))
    return need <= fraction * gpu_bytes


def setup_bytes(cfg: RunConfig) -> int:
    """Bytes the process that creates the simulation needs to build the initial fields."""
    nx, ny, nz = (int(n) for n in cfg.grid.shape)
    return SETUP_BYTES * nx * ny * nz


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB ({int(n)} bytes)"


def _refuse(cfg: RunConfig, need: int, where: str, have: int, source: str) -> None:
    fraction = cfg.solver.max_memory_fraction
    raise ValueError(f"config grid.shape: {list(cfg.grid.shape)} in {cfg.solver.dtype} needs about {_gib(need)} "
                     f"{where}; {source} is {_gib(have)}, of which solver.max_memory_fraction {fraction} allows "
                     f"{_gib(fraction * have)} (a smaller grid, more workers of a job queue, or "
                     "solver.max_memory_fraction: null to skip this check)")


def needs(cfg: RunConfig, host: int) -> list[tuple[int, str, int, str]]:
    """``(bytes needed, for what, bytes available, of what)`` for every comparison the cluster kind
    allows (see the module docstring), the time step first."""
    c = cfg.cluster
    py, pz = _pencils(cfg)
    out = []
    if c.kind in LOCAL_KINDS and cfg.solver.device != "gpu":  # auto may run on the CPU: counted
        out.append((py * pz * worker_bytes(cfg), f"for a time step on {py} x {pz} pencils on this host", host,
                    "this host's memory"))
    elif c.kind in JOBQUEUE_KINDS:
        from dask.utils import parse_bytes

        out.append((worker_bytes(cfg), f"per worker for a time step on {py} x {pz} pencils",
                    parse_bytes(c.memory) // c.gpus_per_node,
                    f"cluster.memory {c.memory} over cluster.gpus_per_node {c.gpus_per_node} workers"))
    out.append((setup_bytes(cfg), "to build the initial fields in this process", host, "this host's memory"))
    return out


def check(cfg: RunConfig, host: int | None = None) -> None:
    """Refuse a validated configuration whose run cannot fit (see the module docstring); ``host``
    overrides this host's memory (bytes)."""
    fraction = cfg.solver.max_memory_fraction
    if fraction is None:
        return
    for need, what, have, source in needs(cfg, host_memory() if host is None else host):
        if need > fraction * have:
            _refuse(cfg, need, what, have, source)
