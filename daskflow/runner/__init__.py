"""``daskflow run / validate / info``: configured runs from the command line.

``run`` validates the configuration before anything starts, starts the embedded cluster (one
worker per pencil: a ``LocalCluster``, or dask-cuda GPU workers over UCX; with ``solver.pencils:
auto`` ``cluster.workers`` or :func:`daskflow.cluster.default_workers`) or connects to a scheduler
address, resolves ``auto`` solver settings (printing the autotuner's table), prints the dashboard
link, advances the simulation in segments with a progress line after each, and ends every run with
the last step's fields and a checkpoint. ``time.steps`` is the length of the run counted from its
initial state, so ``--restart`` continues the same run to the same final step (``time.end_time`` is
a time, also absolute). On Ctrl-C or SIGTERM (a walltime) the run stops after the current step,
writes a checkpoint and exits 0 printing the command that resumes it; a second Ctrl-C stops at once.

What the terminal shows is :class:`Console`'s: daskflow's own lines (``-q``: errors and the final
result only), while Dask's warnings and log messages, those of the embedded cluster's workers
included, go to the run's log file (``STORE.log`` beside a local store) and reach the terminal only
with ``-v``. A failure is one line saying what failed, where and what to do; its traceback is in the
log (``-v`` prints it too).

The commands live in :mod:`~daskflow.runner.execute` (``run``), :mod:`~daskflow.runner.configure`
(the configuration and its checks, ``validate``, ``jobscript``) and :mod:`~daskflow.runner.environment`
(``info``); what the terminal and the log show in :mod:`~daskflow.runner.console` and
:mod:`~daskflow.runner.progress`. Their public names are importable from here.
"""

from daskflow.runner.configure import CLUSTER_KINDS, config_file, jobscript, run_config, validate
from daskflow.runner.console import CONSOLE, OWN_ERRORS, Console, describe
from daskflow.runner.environment import info
from daskflow.runner.execute import RESTART_SECTIONS, resume_command, run
from daskflow.runner.progress import CFL_LIMIT, DIVERGENCE_LIMIT, run_header

__all__ = [
    "CFL_LIMIT", "CLUSTER_KINDS", "CONSOLE", "DIVERGENCE_LIMIT", "OWN_ERRORS", "RESTART_SECTIONS", "Console",
    "config_file", "describe", "info", "jobscript", "resume_command", "run", "run_config", "run_header", "validate",
]
