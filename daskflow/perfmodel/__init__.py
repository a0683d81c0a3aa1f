"""Communication and cost model of the distributed Poisson solve and the channel time step.

What the model counts is read off the code, not assumed:

* Poisson (:mod:`daskflow.poisson.algorithms`): FTM = x->y transpose (``py > 1``), y->z and z->y
  transposes (``pz > 1``), y->x transpose (``py > 1``); P-TDMA (``pz > 1``) = x->y, a gather of the
  reduced-system boundary rows into ``R = min(pz, nys)`` column slices per x group, the scatter of
  the solved rows back, y->x. ``pz = 1`` runs FTM (plain Thomas) for both methods.
* Time step (:mod:`daskflow.ns.stepper`, :class:`daskflow.ns.domain.FlowDomain`): 3 RK substeps,
  each with 4 halo pads (velocity, pressure, predicted velocity, pressure correction; one y and one
  z exchange each), one Poisson solve, with z-implicit diffusion three z-solves (all-gather of the
  boundary rows inside the column group when ``pz > 1``, nothing otherwise) and one bulk-velocity
  all-reduce (flow-rate forcing); one CFL all-reduce per step.

The enumeration is that of the code the committed measurements ran (``docs/results``, up to commit
2854c37), which the model is fitted to. The step now makes fewer rounds at ``pz > 1`` (the three
z-solves share one; P-TDMA all-gathers the boundary rows at ``pz = 2``; the reductions ride on
halos: ``benchmarks/exchange_rounds.py``); the model follows once it is refitted to measurements of
that code.

Pieces are enumerated per (source chunk, destination chunk) with the exact uneven split sizes of
:mod:`daskflow.pencils.layout` and the round-robin chunk owners of
:func:`daskflow.pencils.graph.chunk_owner`, so the bytes leaving a GPU, its peers and the pieces that
stay local are exact. Time = local compute (HBM passes) + per exchange (latency + the busiest GPU's
transfer + the copies that cut and assemble pieces) + the Dask overhead of a solve. Parameters
live in :class:`Machine`; ``H200_DASK`` is fitted to the measured runs in ``docs/results``
(:func:`calibrate`; the JSON files ship with the package, :mod:`daskflow.data` finds them in a
checkout or an installation), ``A100_LEONARDO`` takes the seed paper's hardware table.
"""

from daskflow.perfmodel.fit import (
    MODEL_DEVICE,
    PAPER_STRONG,
    PAPER_WEAK_PER_GPU,
    calibrate,
    default_results_dir,
    load_json,
    load_results,
    paper_predictions,
    summary,
    validate,
)
from daskflow.perfmodel.model import (
    A100_LEONARDO,
    CHANNEL_BC,
    H200_DASK,
    Exchange,
    Layout,
    Machine,
    poisson_exchanges,
    predict_solve,
    predict_step,
    spectral_sizes,
    stage_sources,
    step_exchanges,
    task_count,
    transpose_exchange,
)

__all__ = ["A100_LEONARDO", "CHANNEL_BC", "H200_DASK", "MODEL_DEVICE", "PAPER_STRONG", "PAPER_WEAK_PER_GPU",
           "Exchange", "Layout", "Machine", "calibrate", "default_results_dir", "load_json", "load_results",
           "paper_predictions", "poisson_exchanges", "predict_solve", "predict_step", "spectral_sizes",
           "stage_sources", "step_exchanges", "summary", "task_count", "transpose_exchange", "validate"]
