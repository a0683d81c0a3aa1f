"""How soon the control messages that drive fused pencil work leave their senders.

distributed batches what each side sends on its long-lived streams: a message leaves at once when
the stream sent nothing within its interval, else at the interval's end, with whatever else came
in meanwhile. The intervals are fixed in distributed's code (2026.x): 10 ms for the client, 5 ms
from the scheduler to each worker, 2 ms from the scheduler to a client and from a worker to the
scheduler. A fused run crosses them four times (its submission, the scheduler's dispatch, the
workers' completion, the report to the client); a submission that follows the client's release
or gather of the previous results by less than 10 ms waits for the rest of them. Measured on two
CPU workers of a 2-core host, a no-op task per worker took 19-22 ms from submission to result with
distributed's intervals and 7.6-8.4 ms with 0.5 ms on every stream.

:func:`shorten` sets ``daskflow.control-interval`` on the client's stream, on the scheduler's
streams to its workers and clients (and to workers that join later) and on every worker's stream
to the scheduler (also later ones); :func:`set_intervals` sets any of them, e.g. back to
:data:`DISTRIBUTED` (``benchmarks/control_latency.py`` compares the two). Streams distributed no
longer makes this way are left as they are: the interval is an attribute of distributed's
``BatchedSend``, not a public setting.
"""

from __future__ import annotations

import logging

from distributed.diagnostics.plugin import SchedulerPlugin, WorkerPlugin

logger = logging.getLogger(__name__)

#: distributed's own intervals (seconds) of the streams :func:`intervals` lists
DISTRIBUTED = {"client": 0.01, "scheduler to workers": 0.005, "scheduler to clients": 0.002, "workers": 0.002}
WORKER_PLUGIN = "daskflow-control-interval"
SCHEDULER_PLUGIN = "daskflow-control-interval-scheduler"


def set_interval(stream, seconds: float) -> bool:
    """Give a ``BatchedSend`` ``stream`` the batching interval ``seconds``; ``False`` where the
    object has no such interval (another distributed)."""
    if stream is None or not isinstance(getattr(stream, "interval", None), (int, float)):
        return False
    stream.interval = seconds
    return True


class WorkerInterval(WorkerPlugin):
    """Sets the interval of a worker's stream to the scheduler (on every worker, also later ones)."""

    name = WORKER_PLUGIN

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def setup(self, worker) -> None:
        set_interval(getattr(worker, "batched_stream", None), self.seconds)


class SchedulerInterval(SchedulerPlugin):
    """Sets the interval of the scheduler's stream to each worker that joins later (those there
    when it is registered are set by :func:`set_intervals`)."""

    name = SCHEDULER_PLUGIN

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def add_worker(self, scheduler=None, worker: str | None = None) -> None:
        set_interval(scheduler.stream_comms.get(worker), self.seconds)


def shorten(client) -> float:
    """Give every stream of ``client``'s cluster the interval ``daskflow.control-interval``
    (seconds; once per client and value), also of workers that join later, and return it. Where the
    scheduler or the workers refuse (a scheduler without daskflow installed), their streams keep
    distributed's intervals, with a warning: nothing else depends on them."""
    from daskflow import settings

    seconds = settings.get("control-interval")
    if getattr(client, "_daskflow_control_interval", None) == seconds:
        return seconds
    client._daskflow_control_interval = seconds  # tried once per client and value
    set_interval(getattr(client, "scheduler_comm", None), seconds)
    try:
        client.register_plugin(WorkerInterval(seconds), name=WORKER_PLUGIN)
        client.register_plugin(SchedulerInterval(seconds), name=SCHEDULER_PLUGIN)
        set_intervals(client, {kind: seconds for kind in DISTRIBUTED if kind != "client"})  # the client's: above
    except Exception as error:  # noqa: BLE001 - e.g. a scheduler without daskflow: only latency is lost
        logger.warning("daskflow: the cluster's control streams keep distributed's batching intervals (%s: %s)",
                       type(error).__name__, error)
    return seconds


def set_intervals(client, seconds: dict) -> None:
    """Set the intervals of the streams now on ``client``'s cluster, by kind (the keys of
    :data:`DISTRIBUTED`; kinds left out keep theirs)."""
    def on_scheduler(dask_scheduler=None, to_workers=None, to_clients=None) -> None:
        for stream, value in [*((s, to_workers) for s in dask_scheduler.stream_comms.values()),
                              *((s, to_clients) for s in dask_scheduler.client_comms.values())]:
            if value is not None:
                set_interval(stream, value)

    def on_worker(dask_worker=None, value=None) -> None:
        set_interval(getattr(dask_worker, "batched_stream", None), value)

    if "client" in seconds:
        set_interval(getattr(client, "scheduler_comm", None), seconds["client"])
    client.run_on_scheduler(on_scheduler, to_workers=seconds.get("scheduler to workers"),
                            to_clients=seconds.get("scheduler to clients"))
    if "workers" in seconds:
        client.run(on_worker, value=seconds["workers"])


def intervals(client) -> dict:
    """The intervals (seconds) now on ``client``'s cluster, by kind: the client's, the scheduler's
    to each worker and to its clients, each worker's."""
    def on_scheduler(dask_scheduler=None) -> dict:
        return {"to workers": {a: s.interval for a, s in dask_scheduler.stream_comms.items()},
                "to clients": [s.interval for s in dask_scheduler.client_comms.values()]}

    scheduler = client.run_on_scheduler(on_scheduler)
    return {"client": client.scheduler_comm.interval, "scheduler to workers": scheduler["to workers"],
            "scheduler to clients": scheduler["to clients"],
            "workers": client.run(lambda dask_worker=None: dask_worker.batched_stream.interval)}
