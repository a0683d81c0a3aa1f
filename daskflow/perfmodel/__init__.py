"""Communication and cost model of the distributed Poisson solve and the channel time step.

What the model counts is read off the code, not assumed:

* Poisson (:mod:`daskflow.poisson.algorithms`): FTM = x->y transpose (``py > 1``), y->z and z->y
  transposes (``pz > 1``), y->x transpose (``py > 1``); P-TDMA (``pz > 1``) = x->y, the reduced
  systems' boundary rows (all-gathered in the column group at ``pz <= 2``: one round; gathered into
  ``R = min(pz, nys)`` column slices and the solved rows scattered back otherwise: two), y->x.
  ``pz = 1`` runs FTM (plain Thomas) for both methods.
* Time step (:mod:`daskflow.perfmodel.step`): 3 RK substeps with ten halo rounds a step (the CFL
  maximum and the bulk-velocity sum ride on them), a z-implicit round for the three components of
  a substep at ``pz > 1`` (two at ``pz > 2``), the Poisson solve, one record reduction a step: 17
  rounds at (4, 1), 23 at (2, 2) and (1, 4), as ``benchmarks/exchange_rounds.py`` records them.
  ``Machine.code = "legacy"`` counts the rounds of the code the H200 files ran (up to 65d480e).

Pieces are enumerated per (source chunk, destination chunk) with the exact uneven split sizes of
:mod:`daskflow.pencils.layout` and the round-robin chunk owners of
:func:`daskflow.pencils.graph.chunk_owner`, so the bytes leaving a GPU, its peers and the pieces that
stay local are exact. Two timelines overlap: the GPU's (local compute in HBM passes, the busiest
GPU's link transfers, the copies that cut and assemble pieces, the exchanges' GPU-side latency) and
the host's (a floor per step for launching its kernels from Python, a cost per exchange round and
per distributed tridiagonal solve); a step or solve takes the longer of the two, plus the Dask
overhead of a submitted solve. A step replayed from a CUDA graph (``predict_step(...,
captured=True)``) leaves the host nothing but the replay: its GPU timeline alone. Parameters
live in :class:`Machine`: ``H200_NCCL`` is fitted to the
newest 4 x H200 runs (:func:`calibrate_h200`), ``H100_NVLINK`` to the 4 x H100 runs
(:func:`calibrate_h100`, every number with its file), ``H200_DASK`` to the older 4 x
H200 runs (:func:`calibrate`; no host terms: its exchange latencies hold them), ``A100_LEONARDO``
takes the seed paper's hardware table with the H200's kernels and host; the JSON files ship with the
package, :mod:`daskflow.data` finds them in a checkout or an installation.
"""

from daskflow.perfmodel.fit import (
    MODEL_DEVICE,
    calibrate,
    default_results_dir,
    load_json,
    load_results,
    summary,
    validate,
)
from daskflow.perfmodel.model import (
    A100_LEONARDO,
    CHANNEL_BC,
    H100_NVLINK,
    H200_DASK,
    H200_NCCL,
    Exchange,
    Layout,
    Machine,
    poisson_exchanges,
    predict_solve,
    spectral_sizes,
    stage_sources,
    task_count,
    transpose_exchange,
    without_host,
)
from daskflow.perfmodel.paper import (
    PAPER_CLAIMS,
    PAPER_STRONG,
    PAPER_WEAK_PER_GPU,
    paper_predictions,
    paper_table,
)
from daskflow.perfmodel.refit import (
    H200_FILES,
    H200_PARAMETER_SOURCES,
    PARAMETER_SOURCES,
    calibrate_h100,
    calibrate_h200,
    step_runs,
    step_runs_h200,
    validate_h100,
    validate_h200,
)
from daskflow.perfmodel.step import predict_step, step_exchanges

__all__ = ["A100_LEONARDO", "CHANNEL_BC", "H100_NVLINK", "H200_DASK", "H200_FILES", "H200_NCCL",
           "H200_PARAMETER_SOURCES", "MODEL_DEVICE", "PAPER_CLAIMS", "PAPER_STRONG", "PAPER_WEAK_PER_GPU",
           "PARAMETER_SOURCES", "Exchange", "Layout", "Machine", "calibrate", "calibrate_h100", "calibrate_h200",
           "default_results_dir", "load_json", "load_results", "paper_predictions", "paper_table",
           "poisson_exchanges", "predict_solve", "predict_step", "spectral_sizes", "stage_sources", "step_exchanges",
           "step_runs", "step_runs_h200", "summary", "task_count", "transpose_exchange", "validate", "validate_h100",
           "validate_h200", "without_host"]
