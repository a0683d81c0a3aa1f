"""Transports of the fused exchanges: the wire format, the packed protocol over an in-process
link (the NCCL transport's logic without a GPU), backend selection and configuration."""

import copy
import importlib.util
import queue
import threading
import time
import uuid

import numpy as np
import pytest
from distributed import Client, LocalCluster

from daskflow import Grid, Simulation
from daskflow.config import validate
from daskflow.pencils import copy_engine, transport, wire
from daskflow.pencils.packed import PackedTransport
from daskflow.pencils.transport import CommSpec, choose_comm
from tests.helpers import CHANNEL


def _is_numpy(x) -> bool:
    return isinstance(x, np.ndarray)


# ------------------------------------------------------------------------------------ wire format


def test_a_piece_survives_flattening():
    f_ordered = np.asfortranarray(np.arange(24.0).reshape(2, 3, 4))
    strided = np.arange(40.0).reshape(5, 8)[:, ::2]
    piece = {("u", -1, 0): f_ordered, ("v", 0, 1): strided, "meta": (1.5, None, [np.float64(2.0), "x"])}
    spec, device, host = wire.flatten(piece, lambda x: isinstance(x, np.ndarray) and x.ndim > 0)
    assert [layout[2] for layout in wire.device_layouts(spec)] == ["F", "C"]
    assert all(a.flags.c_contiguous or a.flags.f_contiguous for a in device)
    buffers = [np.empty(shape, dtype, order=order) for shape, dtype, order in wire.device_layouts(spec)]
    for buf, leaf in zip(buffers, device, strict=True):
        buf[...] = leaf
    back = wire.unflatten(spec, buffers, host)
    assert back.keys() == piece.keys()
    np.testing.assert_array_equal(back[("u", -1, 0)], f_ordered)
    assert back[("u", -1, 0)].flags.f_contiguous
    np.testing.assert_array_equal(back[("v", 0, 1)], strided)
    assert back["meta"] == (1.5, None, [2.0, "x"]) and isinstance(back["meta"], tuple)


def test_a_spec_travels_once_per_peer():
    sender, receiver = wire.SpecBook(), wire.SpecBook()
    spec = wire.flatten(np.zeros((2, 2)), _is_numpy)[0]
    first = sender.describe(1, spec)
    again = sender.describe(1, spec)
    assert first == (0, spec) and again == (0, None)
    assert sender.describe(2, spec) == (0, spec)  # another peer has not seen it
    assert receiver.resolve(0, *first) == spec and receiver.resolve(0, *again) == spec


# ------------------------------------------------------------------------------------ in-process link


class LoopbackHub:
    """Queues between the ranks of one process: what NCCL does between processes."""

    def __init__(self) -> None:
        self.headers: dict = {}
        self.payloads: dict = {}
        self.lock = threading.Lock()

    def queue(self, table: dict, src: int, dst: int) -> queue.Queue:
        with self.lock:
            return table.setdefault((src, dst), queue.Queue())


class LoopbackLink:
    """A :class:`~daskflow.pencils.transport.Link` over a :class:`LoopbackHub` (NumPy buffers)."""

    def __init__(self, hub: LoopbackHub, rank: int) -> None:
        self.hub, self.rank = hub, rank
        self.header_bytes = 0

    def _get(self, q, abort, timeout):
        deadline = time.monotonic() + timeout
        while True:
            try:
                return q.get(timeout=0.01)
            except queue.Empty:
                if abort():
                    raise transport.PeerAborted("loopback: the run was aborted") from None
                if time.monotonic() > deadline:
                    raise TimeoutError("loopback: nothing arrived") from None

    def header_round(self, send, recv_from, abort, timeout):
        for peer, data in send.items():
            self.header_bytes += len(data)
            self.hub.queue(self.hub.headers, self.rank, peer).put(data)
        return {peer: self._get(self.hub.queue(self.hub.headers, peer, self.rank), abort, timeout)
                for peer in recv_from}

    def payload_round(self, sends, recvs, abort, timeout):
        for peer, buf in sends:
            self.hub.queue(self.hub.payloads, self.rank, peer).put(buf.copy(order="K"))
        for peer, buf in recvs:
            buf[...] = self._get(self.hub.queue(self.hub.payloads, peer, self.rank), abort, timeout)

    def empty(self, shape, dtype, order):
        return np.empty(shape, dtype=np.dtype(dtype), order=order)

    def is_device(self, x) -> bool:
        return isinstance(x, np.ndarray) and x.ndim > 0

    def abort(self) -> None:
        pass


class PostingLoopbackLink(LoopbackLink):
    """A loopback link whose payloads move while the caller goes on, as NCCL's do on its transfer
    stream: a posted payload's receive buffers are filled only when it is waited for, so a piece
    used before its wait holds garbage."""

    overlaps = True
    posts = 0

    def payload_post(self, sends, recvs):
        type(self).posts += 1
        self.payload_round(sends, [], lambda: False, 60.0)
        for _, buf in recvs:
            buf[...] = np.nan
        return recvs

    def payload_wait(self, recvs):
        self.payload_round([], recvs, lambda: False, 60.0)


class HostWindows(copy_engine.WindowPool):
    """A pool of windows over NumPy buffers (no communicator), its windows in the order made."""

    made = 0  # windows made, over every rank

    def __init__(self) -> None:
        super().__init__()
        self.windows: list[copy_engine.Window] = []

    def _allocate(self, nbytes: int) -> copy_engine.Window:
        type(self).made += 1
        self.windows.append(copy_engine.Window(np.empty(nbytes, np.uint8), np.empty(nbytes, np.uint8), nbytes))
        return self.windows[-1]


class CollectiveLoopbackLink(PostingLoopbackLink):
    """A posting loopback link with an all-to-all of its own, as NCCL's copy engines: pieces packed
    into slots of pooled windows, the received ones views of a receive buffer whose bytes are all
    ones (NaN) until the wait."""

    alltoalls = 0  # all-to-alls waited for, over every rank

    def __init__(self, hub: LoopbackHub, rank: int, size: int) -> None:
        super().__init__(hub, rank)
        self.size, self.windows = size, HostWindows()

    def collective_slot(self, sizes, peers, abort, timeout):
        local = max(copy_engine.packed(s)[1] for s in sizes) if sizes and peers == self.size - 1 else 0
        others = [p for p in range(self.size) if p != self.rank]
        received = self.header_round({p: local.to_bytes(8, "little") for p in others}, others, abort, timeout)
        values = [local, *(int.from_bytes(v, "little") for v in received.values())]
        slot = 0 if min(values) == 0 else max(values)
        if slot:
            self.windows.reserve(self.size * slot)  # as the NCCL link: while every rank is there
        return slot

    def collective_post(self, sends, layouts, slot):
        window = self.windows.take(self.size * slot)
        for peer, leaves in sends.items():
            offsets, _ = copy_engine.packed([leaf.nbytes for leaf in leaves])
            for leaf, offset in zip(leaves, offsets, strict=True):
                start = peer * slot + offset
                window.send[start:start + leaf.nbytes] = leaf.reshape(-1, order="A").view(np.uint8)
            self.hub.queue(self.hub.payloads, self.rank, peer).put(window.send[peer * slot:(peer + 1) * slot].copy())
        window.recv[...] = 0xFF
        received = {}
        for peer, entries in layouts.items():
            offsets, _ = copy_engine.packed([wire.layout_nbytes(layout) for layout in entries])
            received[peer] = [np.ndarray(shape, np.dtype(dtype), buffer=window.recv, offset=peer * slot + offset,
                                         order=order)
                              for (shape, dtype, order), offset in zip(entries, offsets, strict=True)]
        return received, (window, slot, list(layouts))

    def collective_wait(self, token) -> None:
        window, slot, peers = token
        for peer in peers:
            window.recv[peer * slot:(peer + 1) * slot] = self._get(self.hub.queue(self.hub.payloads, peer, self.rank),
                                                                   lambda: False, 60.0)
        type(self).alltoalls += 1
        self.windows.give(window)


HUBS: dict = {}


def _loopback(spec: CommSpec, rank: int) -> LoopbackLink:
    return LoopbackLink(HUBS.setdefault(spec.ids, LoopbackHub()), rank)


def _posting_loopback(spec: CommSpec, rank: int) -> LoopbackLink:
    return PostingLoopbackLink(HUBS.setdefault(spec.ids, LoopbackHub()), rank)


def _collective_loopback(spec: CommSpec, rank: int) -> LoopbackLink:
    return CollectiveLoopbackLink(HUBS.setdefault(spec.ids, LoopbackHub()), rank, len(spec.workers))


def _all_to_all(transports, pieces, site=None, on_error=None):
    """Every rank sends ``pieces(src, dst)`` to every rank (itself included), in threads; a rank's
    result is its error where its exchange raised (after calling ``on_error``)."""
    n = len(transports)
    results = [None] * n

    def run(rank):
        out = [(f"w{d}", ("x", rank, d), pieces(rank, d)) for d in range(n)]
        inc = [(f"w{s}", ("x", s, rank)) for s in range(n)]
        try:
            results[rank] = transports[rank].exchange(out, inc, "run", site=site)
        except Exception as exc:  # noqa: BLE001 - returned for the test to assert on
            results[rank] = exc
            if on_error is not None:
                on_error()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()  # every exchange ends: its waits are bounded by the transport timeout
    return results


def test_packed_exchanges_deliver_every_piece_and_send_layouts_once():
    hub = LoopbackHub()
    ranks = {f"w{i}": i for i in range(3)}
    links = [LoopbackLink(hub, i) for i in range(3)]
    transports = [PackedTransport("loopback", links[i], ranks, f"w{i}", 60.0, lambda run: False)
                  for i in range(3)]

    def pieces(s, d):
        return {"face": np.full((4, 2), 10.0 * s + d), "value": float(s), "empty": np.zeros((0, 3))}

    first = _all_to_all(transports, pieces)
    sent_first = [link.header_bytes for link in links]
    again = _all_to_all(transports, pieces)
    for results in (first, again):
        for d, got in enumerate(results):
            for s in range(3):
                piece = got[("x", s, d)]
                np.testing.assert_array_equal(piece["face"], np.full((4, 2), 10.0 * s + d))
                assert piece["value"] == float(s) and piece["empty"].shape == (0, 3)
    second = [link.header_bytes - b for link, b in zip(links, sent_first, strict=True)]
    assert all(b < a / 2 for a, b in zip(sent_first, second, strict=True))  # numbers instead of layouts


def test_a_fixed_layout_site_describes_its_pieces_once_and_refuses_a_changed_layout():
    hub = LoopbackHub()
    ranks = {f"w{i}": i for i in range(3)}
    links = [LoopbackLink(hub, i) for i in range(3)]
    failed = threading.Event()  # a rank that raised aborts the run: the others stop waiting for it
    transports = [PackedTransport("loopback", links[i], ranks, f"w{i}", 600.0, lambda run: failed.is_set())
                  for i in range(3)]

    def pieces(s, d, rows=4):
        return {(1, 0): np.full((2, rows, 1), 10.0 * s + d), (0, 1): np.arange(3.0) + s}

    for call in range(3):
        headers_before = [link.header_bytes for link in links]
        results = _all_to_all(transports, pieces, site="halo")
        for d, got in enumerate(results):
            for s in range(3):
                np.testing.assert_array_equal(got[("x", s, d)][(1, 0)], np.full((2, 4, 1), 10.0 * s + d))
                np.testing.assert_array_equal(got[("x", s, d)][(0, 1)], np.arange(3.0) + s)
        described = [link.header_bytes - b for link, b in zip(links, headers_before, strict=True)]
        assert all(described) if call == 0 else not any(described)  # only the first call has a header round

    changed = _all_to_all(transports, lambda s, d: pieces(s, d, rows=5 if s == 0 else 4), site="halo",
                          on_error=failed.set)
    assert isinstance(changed[0], RuntimeError) and "layouts changed" in str(changed[0])

    with_values = _all_to_all(transports, lambda s, d: {"value": float(s)}, site="reduce")
    assert all(isinstance(r, ValueError) and "no host values" in str(r) for r in with_values)


def test_a_mismatched_exchange_sequence_is_an_error_not_a_silent_mix():
    hub = LoopbackHub()
    ranks = {"w0": 0, "w1": 1}
    t0 = PackedTransport("loopback", LoopbackLink(hub, 0), ranks, "w0", 5.0, lambda run: False)
    t1 = PackedTransport("loopback", LoopbackLink(hub, 1), ranks, "w1", 5.0, lambda run: False)
    errors = []

    def rank0():
        t0.exchange([("w1", ("a", 0), np.ones(3)), ("w1", ("a", 1), np.ones(3))], [("w1", ("b", 0))], "run")

    def rank1():
        try:  # expects one piece, gets two
            t1.exchange([("w0", ("b", 0), np.ones(2))], [("w0", ("a", 0))], "run")
        except RuntimeError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=rank0, daemon=True), threading.Thread(target=rank1)]
    for t in threads:
        t.start()
    threads[1].join()
    assert errors and "exchange sequences differ" in errors[0]


# ------------------------------------------------------------------------------------ on a cluster


@pytest.fixture
def loopback(monkeypatch):
    """A transport "loopback": the packed protocol over in-process queues between threaded workers
    (the NCCL transport's logic, and its communicator handling, without a GPU)."""
    import daskflow.poisson.solver

    _register_link(monkeypatch, "loopback", _loopback)
    monkeypatch.setattr(daskflow.poisson.solver, "COMMS", transport.COMMS)


@pytest.fixture
def posting_loopback(loopback, monkeypatch):
    """Besides ``loopback``, "posting-loopback": its payloads move while the caller goes on
    (:class:`PostingLoopbackLink`), as NCCL's do."""
    import daskflow.poisson.solver

    _register_link(monkeypatch, "posting-loopback", _posting_loopback)
    monkeypatch.setattr(daskflow.poisson.solver, "COMMS", transport.COMMS)


@pytest.fixture
def collective_loopback(loopback, monkeypatch):
    """Besides ``loopback``, "collective-loopback": a posting link with an all-to-all of its own
    (:class:`CollectiveLoopbackLink`), as NCCL's copy engines."""
    import daskflow.poisson.solver

    _register_link(monkeypatch, "collective-loopback", _collective_loopback)
    monkeypatch.setattr(daskflow.poisson.solver, "COMMS", transport.COMMS)


def _register_link(monkeypatch, name: str, link) -> None:
    monkeypatch.setitem(transport.LINKS, name, link)
    monkeypatch.setitem(transport.BOOTSTRAPS, name, lambda client, workers, device: (uuid.uuid4().hex,))
    monkeypatch.setattr(transport, "COMMS", (*transport.COMMS, name))


def _channel(pencils):
    cfg = copy.deepcopy(CHANNEL)
    cfg["solver"] = {"pencils": list(pencils)}
    cfg["time"] = {**cfg.get("time", {}), "implicit_diffusion": "z"}
    cfg["physics"] = {**cfg["physics"], "forcing": {"kind": "flow_rate", "value": [0.6667, 0.0]}}
    return cfg


@pytest.mark.parametrize("pencils", [(2, 2), (1, 4), (4, 1)])
def test_packed_transport_steps_equal_the_mailbox_bit_for_bit(loopback, pencils):
    """The NCCL transport's protocol, run over in-process queues between four threaded workers:
    halos with edges and corners, reductions, transposes and z solves give the mailbox's bits."""
    with LocalCluster(n_workers=4, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        runs = {}
        for comm in ("mailbox", "loopback"):
            sim = Simulation(_channel(pencils), client=client)
            if comm == "loopback":
                sim.comm = comm
            sim.run(steps=4)
            runs[comm] = ({name: np.asarray(getattr(sim, name).compute()) for name in "uvwp"}, sim.diagnostics())
    for name in "uvwp":
        np.testing.assert_array_equal(runs["loopback"][0][name], runs["mailbox"][0][name])
    assert runs["loopback"][1] == runs["mailbox"][1]


@pytest.mark.parametrize("pencils", [(2, 2), (4, 1)])
def test_transposes_pipelined_in_slabs_equal_whole_ones_bit_for_bit(posting_loopback, pencils):
    """Over a link that moves payloads while the computation goes on, the pressure and Helmholtz
    transposes run in z slabs (``daskflow.transpose-slabs``), each slab's pieces used only after
    its wait (before it they are NaN): the steps give the bits of whole transposes."""
    import dask

    import daskflow.settings  # noqa: F401 - its keys registered before the override, not inside it

    with LocalCluster(n_workers=4, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client, dask.config.set({"daskflow.transpose-slabs": 3}):
        runs = {}
        for comm in ("loopback", "posting-loopback"):
            cfg = _channel(pencils)
            cfg["time"]["implicit_diffusion"] = "xyz"  # Helmholtz solves: transposes of their own plans
            sim = Simulation(cfg, client=client)
            sim.comm = comm
            PostingLoopbackLink.posts = 0
            sim.run(steps=2)
            runs[comm] = {name: np.asarray(getattr(sim, name).compute()) for name in "uvwp"}
    # per worker and substep: the pressure and three Helmholtz solves, two transposes of three slabs each
    assert PostingLoopbackLink.posts == 4 * 2 * 3 * 4 * 2 * 3
    for name in "uvwp":
        np.testing.assert_array_equal(runs["posting-loopback"][name], runs["loopback"][name])


class _CollectiveGraphsNeverCaptured:
    """Stands in for the step graphs of pencils (:class:`daskflow.ns.graphs.StepGraphs`, which needs
    CuPy): collective, and every step runs from the host."""

    collective, graph = True, None

    def step(self, stepper, state, dt) -> bool:
        return False

    def detach(self, state) -> None:
        pass


def test_steps_of_pencils_with_graphs_pipeline_their_pressure_transposes(posting_loopback, monkeypatch):
    """Pencils whose steps are captured, of at least ``graphs.PIPELINED_POINTS`` points, run the
    pressure solve's transposes in ``daskflow.step-transpose-slabs`` z slabs (a replay pays no host
    time per slab) whatever ``daskflow.transpose-slabs`` says; smaller ones keep whole transposes
    (short slabs cost NCCL's latency each). The bits stay those of whole transposes."""
    import dask

    import daskflow.settings  # noqa: F401 - its keys registered before the override, not inside it
    from daskflow.ns import graphs

    with LocalCluster(n_workers=4, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client, dask.config.set({"daskflow.transpose-slabs": 1,
                                                        "daskflow.step-transpose-slabs": 3}):
        runs, posts = {}, {}
        for case in ("uncaptured", "captured, small", "captured"):
            # the workers are threads of this process: they see the stand-in and the limit
            if case != "uncaptured":
                monkeypatch.setattr(graphs, "for_stepper", lambda stepper, state: _CollectiveGraphsNeverCaptured())
            monkeypatch.setattr(graphs, "PIPELINED_POINTS", 1 if case == "captured" else graphs.PIPELINED_POINTS)
            sim = Simulation(_channel((4, 1)), client=client)
            sim.comm = "posting-loopback"
            PostingLoopbackLink.posts = 0
            sim.run(steps=2)
            runs[case] = {name: np.asarray(getattr(sim, name).compute()) for name in "uvwp"}
            posts[case] = PostingLoopbackLink.posts
    # per worker, step and substep: the pressure solve's two transposes, in three slabs each
    assert posts == {"uncaptured": 0, "captured, small": 0, "captured": 4 * 2 * 3 * 2 * 3}
    for name in "uvwp":
        np.testing.assert_array_equal(runs["captured"][name], runs["uncaptured"][name])


@pytest.mark.parametrize(("pencils", "slabs", "alltoalls"), [((4, 1), 3, 4 * 2 * 3 * 2 * 3), ((4, 1), 1, 4 * 2 * 3 * 2),
                                                            ((2, 2), 3, 0)])
def test_collective_transposes_equal_point_to_point_ones_bit_for_bit(collective_loopback, pencils, slabs, alltoalls):
    """Over a link with an all-to-all of its own (as NCCL's copy engines), a transpose among all the
    workers moves as one all-to-all per slab, each received piece a view of the link's receive
    buffer, unset (NaN) until its wait: the steps give the bits of point-to-point transposes, and the
    link's windows are reused rather than made per exchange. At (2, 2) each transpose joins two
    workers of four: it stays point to point."""
    import dask

    import daskflow.settings  # noqa: F401 - its keys registered before the override, not inside it

    with LocalCluster(n_workers=4, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client, dask.config.set({"daskflow.transpose-slabs": slabs}):
        runs = {}
        for comm in ("loopback", "collective-loopback"):
            sim = Simulation(_channel(pencils), client=client)
            sim.comm = comm
            CollectiveLoopbackLink.alltoalls = HostWindows.made = 0
            sim.run(steps=2)
            runs[comm] = {name: np.asarray(getattr(sim, name).compute()) for name in "uvwp"}
    # per worker, step and substep: the pressure solve's two transposes, one all-to-all per slab
    assert CollectiveLoopbackLink.alltoalls == alltoalls
    assert HostWindows.made <= 4 * 2 * slabs  # per worker: the slabs in flight, for each direction at most
    for name in "uvwp":
        np.testing.assert_array_equal(runs["collective-loopback"][name], runs["loopback"][name])


def test_auto_uses_the_mailbox_on_cpu_workers_and_nccl_is_refused():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        workers = sorted(client.scheduler_info()["workers"])
        assert choose_comm(client, workers, "auto", "cpu") == "mailbox"
        assert choose_comm(client, workers[:1], "nccl", "gpu") == "mailbox"  # one participant: nothing moves
        with pytest.raises(ValueError, match="config cluster.comm: 'nccl' needs GPU workers"):
            choose_comm(client, workers, "nccl", "cpu")
        sim = Simulation(_channel((1, 2)), client=client)
        assert sim.comm == "mailbox"


def test_the_store_records_the_transport_that_ran(tmp_path):
    import zarr

    cfg = _channel((1, 2))
    cfg["output"] = {"store": str(tmp_path / "run.zarr")}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        Simulation(cfg, client=client)
    attrs = zarr.open_group(str(tmp_path / "run.zarr"), mode="r").attrs
    assert attrs["exchanges"] == {"comm": "mailbox", "workers": 2, "chosen": "setting"}  # one candidate: untimed
    assert attrs["config"]["cluster"]["comm"] == "auto"  # the request stays as it was given


def test_auto_times_every_usable_backend_and_the_store_notes_the_choice(loopback, tmp_path, monkeypatch):
    """On a cluster, ``cluster.comm: auto`` times each usable backend with the run's decomposition
    and pressure solver (here the packed protocol over the loopback and the mailbox), runs on the
    fastest and notes it in the store; the configuration keeps ``auto``. A restart on the same
    cluster shape keeps the checkpoint's pencils and times the backends again (a cache hit)."""
    import zarr

    from daskflow import autotune
    from daskflow.io import store

    monkeypatch.setenv("DASKFLOW_CACHE_DIR", str(tmp_path / "cache"))
    cfg = _channel((1, 2))
    cfg["output"] = {"store": str(tmp_path / "run.zarr"), "checkpoint_every": 2}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        before = autotune.timed_solves
        sim = Simulation(cfg, client=client)
        table = sim.autotune.table
        assert [row["comm"] for row in table] == ["loopback", "mailbox"] and autotune.timed_solves > before
        assert sim.comm == sim.autotune.comm == min(table, key=lambda row: row["median_ms"])["comm"]
        assert any("<- chosen" in line and sim.comm in line for line in sim.autotune.lines())
        sim.run(steps=2)
        attrs = zarr.open_group(str(tmp_path / "run.zarr"), mode="r").attrs
        assert attrs["exchanges"] == {"comm": sim.comm, "workers": 2, "chosen": "timed"}
        assert store.root_config(str(tmp_path / "run.zarr"))["cluster"]["comm"] == "auto"

        # the fastest backend wins, whichever it is
        def loopback_faster(grid, bc, dtype, cands, *args):
            return [autotune._row(p, m, [1e-3 if c == "loopback" else 2e-3], 0.0, c)
                    for p, m in cands for c in args[-1]]

        monkeypatch.setattr(autotune, "time_candidates", loopback_faster)
        monkeypatch.setenv("DASKFLOW_CACHE_DIR", str(tmp_path / "other-cache"))
        again = Simulation.restart(str(tmp_path / "run.zarr"), client=client)
        assert again.comm == "loopback" and "kept from the checkpoint" in again.autotune.lines()[0]
        again.run(steps=1)
        assert zarr.open_group(str(tmp_path / "run.zarr"), mode="r").attrs["exchanges"]["comm"] == "loopback"


def _broken_link(spec: CommSpec, rank: int):
    raise RuntimeError("this backend cannot start here")


def test_a_backend_that_fails_while_timed_is_a_row_not_a_failed_run(loopback, tmp_path, monkeypatch):
    from daskflow import autotune

    monkeypatch.setenv("DASKFLOW_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(transport.LINKS, "broken", _broken_link)
    monkeypatch.setitem(transport.BOOTSTRAPS, "broken", lambda client, workers, device: (uuid.uuid4().hex,))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        result = autotune.autotune(Grid((8, 8, 8), (1.0, 1.0, 1.0)), ("PP", "PP", "NN"), client=client,
                                   pencils=(1, 2), method="ptdma", repeats=2, rounds=1)
        by_comm = {row["comm"]: row for row in result.table}
        assert set(by_comm) == {"loopback", "broken", "mailbox"}
        assert by_comm["broken"]["median_ms"] is None and "cannot start here" in by_comm["broken"]["error"]
        assert result.comm in ("loopback", "mailbox")
        assert any("broken" in line and "failed" in line for line in result.lines())
        sim = Simulation(_channel((1, 2)), client=client)  # a simulation times them too, and runs on one that works
        assert sim.comm in ("loopback", "mailbox")


def test_the_comm_setting_is_validated():
    assert validate({"grid": {"shape": [8, 8, 8]},
                     "physics": {"nu": 0.1, "forcing": {"kind": "none"}}})["cluster"]["comm"] == "auto"
    with pytest.raises(ValueError, match="cluster.comm: must be one of auto, mailbox, nccl, ucx; got 'mpi'"):
        validate({"cluster": {"comm": "mpi"}})
    with pytest.raises(ValueError, match="cluster.comm: 'nccl' .* solver.device cpu"):
        validate({"cluster": {"comm": "nccl"}, "solver": {"device": "cpu"}})


@pytest.mark.parametrize("handle_errors", [False, True])
def test_ucx_endpoints_ask_for_peer_error_handling_only_where_the_key_says(monkeypatch, handle_errors):
    """UCX leaves out the transports that cannot report a failed peer (shared memory among them) when
    an endpoint asks for that: the link's endpoints ask only with ``daskflow.ucx-error-handling``."""
    import dask

    from daskflow.pencils import ucx

    made = []

    class FakeUcxx:  # what the link calls of UCXX, recorded
        continuous_ucx_progress = staticmethod(lambda: None)
        get_ucx_address_from_buffer = staticmethod(lambda address: address)

        @staticmethod
        async def create_endpoint_from_worker_address(address, **kwargs):
            made.append((address, kwargs))
            return object()

    monkeypatch.setattr(ucx, "_ucxx", lambda: FakeUcxx)
    with dask.config.set({"daskflow.ucx-error-handling": handle_errors}):
        ucx.UcxLink(3, 1, ("token", "cpu", [b"a0", b"a1", b"a2"]))
    assert made == [(b"a0", {"endpoint_error_handling": handle_errors}),
                    (b"a2", {"endpoint_error_handling": handle_errors})]


@pytest.mark.skipif(importlib.util.find_spec("ucxx") is None, reason="needs UCXX (ucxx-cu13 or ucxx-cu12)")
def test_ucx_transport_steps_equal_the_mailbox_bit_for_bit():
    """UCXX endpoints between two worker processes (NumPy pieces over UCX's shared memory or TCP):
    the same bits as the mailbox, for a y split and a z split."""
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster) as client:
        for pencils in ((1, 2), (2, 1)):
            runs = {}
            for comm in ("mailbox", "ucx"):
                cfg = _channel(pencils)
                cfg["cluster"] = {"comm": comm}
                sim = Simulation(cfg, client=client)
                assert sim.comm == comm
                sim.run(steps=3)
                runs[comm] = {name: np.asarray(getattr(sim, name).compute()) for name in "uvwp"}
            for name in "uvwp":
                np.testing.assert_array_equal(runs["ucx"][name], runs["mailbox"][name])


@pytest.mark.skipif(importlib.util.find_spec("ucxx") is None, reason="needs UCXX (ucxx-cu13 or ucxx-cu12)")
def test_ucx_poisson_solves_equal_the_mailbox_bit_for_bit():
    import dask.array as da

    from daskflow import Grid, PoissonSolver
    from daskflow.poisson.distributed import home_chunks

    grid = Grid((8, 12, 16), (2.0, 1.0, 2.0), z_stretch=2.0)
    b = np.asfortranarray(np.random.default_rng(3).standard_normal(grid.shape))
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster):
        for method, pencils in (("ptdma", (1, 2)), ("ftm", (2, 1))):
            out = {}
            for comm in ("mailbox", "ucx"):
                solver = PoissonSolver(grid, ("PP", "NN", "DN"), "ccc", method, pencils, granularity="fused",
                                       comm=comm)
                out[comm] = solver.solve(da.from_array(b, chunks=home_chunks(solver))).compute()
            np.testing.assert_array_equal(out["ucx"], out["mailbox"])


@pytest.mark.skipif(importlib.util.find_spec("ucxx") is None, reason="needs UCXX (ucxx-cu13 or ucxx-cu12)")
def test_simulations_share_a_communicator_until_a_failed_run_aborts_it():
    """Two simulations on one worker set use one communicator (NCCL's buffers are large); a failed
    run aborts it on every worker, and the next run builds a new one and goes on."""
    cfg = _channel((1, 2))
    cfg["cluster"] = {"comm": "ucx"}
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster) as client:
        first, second = Simulation(cfg, client=client).run(steps=1), Simulation(cfg, client=client).run(steps=1)
        assert first._cluster.comm_spec.key == second._cluster.comm_spec.key  # one communicator, two runs on it
        shared = first._cluster.comm_spec
        _inject_failure(client, "daskflow.ns.runs", "advance", worker=1)
        with pytest.raises(RuntimeError, match="injected"):
            first.run(steps=1)
        assert not all(client.run(transport.comm_alive, shared.key).values())
        second.run(steps=2)
        assert second._cluster.comm_spec.key != shared.key and second.step == 3


def _inject_failure(client, module: str, name: str, worker: int) -> None:
    """``module.name`` raises once in the process of worker ``worker`` (sorted by address)."""
    client.run(_fail_once, module, name, workers=[sorted(client.scheduler_info()["workers"])[worker]])


def _fail_once(module: str, name: str, dask_worker=None):
    """Make ``module.name`` raise once in this worker's process: its next run or solve fails before
    its first exchange, and its peers are left waiting in theirs."""
    import importlib

    target = importlib.import_module(module)
    original = getattr(target, name)

    def failing(*args, **kwargs):
        setattr(target, name, original)
        raise RuntimeError("injected failure")

    setattr(target, name, failing)


def test_a_failed_run_reports_the_failing_task_not_the_peers_it_aborted():
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        sim = Simulation(_channel((1, 2)), client=client).run(steps=1)
        _inject_failure(client, "daskflow.ns.runs", "advance", worker=1)
        with pytest.raises(RuntimeError, match="injected"):
            sim.run(steps=1)
        assert sim.run(steps=1).step == 2  # the next run goes on from the state before the failure


def test_runs_ask_the_workers_about_their_communicator_only_after_a_failure(loopback, monkeypatch):
    """Only a failed run aborts a communicator, so the round trip that checks it on every worker is
    made before the first run after a failure, not before every run; the run after the failure
    gets a new communicator and goes on."""
    asked = []
    run = Client.run

    def counting_run(self, function, *args, **kwargs):
        if function is transport.comm_alive:
            asked.append(args[0])
        return run(self, function, *args, **kwargs)

    monkeypatch.setattr(Client, "run", counting_run)
    with _threaded_cluster() as cluster, Client(cluster) as client:
        sim = Simulation(_channel((1, 2)), client=client)
        sim.comm = "loopback"
        sim.run(steps=1).run(steps=1).run(steps=1)
        first = sim._cluster.comm_spec
        assert asked == []
        _inject_failure(client, "daskflow.ns.runs", "advance", worker=1)
        with pytest.raises(RuntimeError, match="injected"):
            sim.run(steps=1)
        sim.run(steps=1)
        assert asked == [first.key]  # one round trip to the workers
        assert sim._cluster.comm_spec.key != first.key and sim.step == 4
        sim.run(steps=1)
        assert asked == [first.key]


def test_a_task_that_fails_before_its_run_does_not_leave_its_peers_waiting():
    """A fused task that fails before it joins the run cannot tell its peers, and no task of the
    graph stands between them (chained solves have no ready markers): the client aborts the solve
    on every worker instead of leaving them to the exchanges' ten-minute timeout; the next solve
    works."""
    import dask.array as da
    from distributed import futures_of, wait

    from daskflow.poisson.distributed import home_chunks

    b = np.asfortranarray(np.random.default_rng(8).standard_normal((8, 12, 16)))
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        solver = _poisson("mailbox")
        x = solver.solve(da.from_array(b, chunks=home_chunks(solver)))
        wait(x)
        _inject_failure(client, "daskflow.poisson.distributed", "_run_for_one_chunk", worker=1)
        failed = solver.solve(x)
        wait(failed, timeout=300)  # a bound for a hang, not a speed expectation
        assert sorted(type(f.exception()).__name__ for f in futures_of(failed)) == ["PeerAborted", "RuntimeError"]
        again = solver.solve(x).compute()  # the same solve again: keys and a run of its own
    np.testing.assert_allclose(again, solver.solve(solver.solve(b)), rtol=0, atol=1e-12 * np.abs(again).max())


def _threaded_cluster():
    return LocalCluster(n_workers=2, threads_per_worker=2, processes=False, dashboard_address=None)


def _poisson(comm):
    from daskflow import Grid, PoissonSolver

    grid = Grid((8, 12, 16), (2.0, 1.0, 2.0), z_stretch=2.0)
    return PoissonSolver(grid, ("PP", "NN", "DN"), "ccc", "ptdma", (1, 2), granularity="fused", comm=comm)


def test_solves_in_flight_together_take_turns_on_a_shared_communicator(loopback):
    """Four fused solves submitted at once on one communicator: each waits for the previous one on
    every worker, so their exchanges never mix (without that they did: wrong numbers, no error)."""
    import dask.array as da

    from daskflow.poisson.distributed import home_chunks

    rng = np.random.default_rng(5)
    with _threaded_cluster() as cluster, Client(cluster) as client:
        solver = _poisson("loopback")
        rhs = [np.asfortranarray(rng.standard_normal(solver.grid.shape)) for _ in range(4)]
        pending = [solver.solve(da.from_array(b, chunks=home_chunks(solver))) for b in rhs]  # all in flight
        results = client.gather(client.compute(pending))
    for b, x in zip(rhs, results, strict=True):
        np.testing.assert_allclose(x, solver.solve(b), rtol=0, atol=1e-12 * np.abs(x).max())


def test_different_solvers_in_flight_together_take_turns_on_the_shared_communicator(loopback):
    """Solvers of other decompositions and methods on the same workers share one communicator: their
    fused solves, all submitted at once, take turns on every worker as one solver's do. Each solve is
    submitted twice: two runs, each with keys of its own, the second waiting for the first."""
    import dask.array as da

    from daskflow import Grid, PoissonSolver
    from daskflow.poisson.distributed import home_chunks

    grid = Grid((8, 12, 16), (2.0, 1.0, 2.0), z_stretch=2.0)
    solvers = [PoissonSolver(grid, ("PP", "NN", "DN"), "ccc", method, pencils, granularity="fused", comm="loopback")
               for method in ("ptdma", "ftm") for pencils in ((1, 2), (2, 1))]
    b = np.asfortranarray(np.random.default_rng(8).standard_normal(grid.shape))
    with _threaded_cluster() as cluster, Client(cluster) as client:
        pending = [s.solve(da.from_array(b, chunks=home_chunks(s))) for s in solvers for _ in range(2)]
        results = client.gather(client.compute(pending))
    reference = solvers[0].solve(b)
    for x in results:
        np.testing.assert_allclose(x, reference, rtol=0, atol=1e-12 * np.abs(reference).max())


def _layer_keys(name: str, dask_scheduler=None) -> int:
    return sum(1 for k in dask_scheduler.tasks if isinstance(k, tuple) and k[0] == name)


@pytest.mark.parametrize("method, pencils", [("ptdma", (1, 2)), ("ftm", (2, 1))])
def test_chained_solves_describe_their_pieces_once(loopback, monkeypatch, method, pencils):
    """The layouts of a solver's exchanges are the same at every solve: the header round that
    describes them (a wait for every peer on the host) is made at the first solve only; the
    solutions are the same."""
    import dask.array as da
    from distributed import wait

    from daskflow import Grid, PoissonSolver
    from daskflow.poisson.distributed import home_chunks

    described = []
    describe = transport.PackedTransport._describe
    monkeypatch.setattr(transport.PackedTransport, "_describe",
                        lambda self, *args: described.append(1) or describe(self, *args))
    grid = Grid((8, 12, 16), (2.0, 1.0, 2.0), z_stretch=2.0)
    b = np.asfortranarray(np.random.default_rng(9).standard_normal(grid.shape))
    with _threaded_cluster() as cluster, Client(cluster):
        solver = PoissonSolver(grid, ("PP", "NN", "DN"), "ccc", method, pencils, granularity="fused", comm="loopback")
        x = solver.solve(da.from_array(b, chunks=home_chunks(solver)))
        wait(x)
        first = len(described)
        for _ in range(3):
            x = solver.solve(x)
        out = x.compute()
    assert first > 0 and len(described) == first
    expected = b
    for _ in range(4):
        expected = solver.solve(expected)
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-12 * np.abs(expected).max())


def test_a_finished_solve_holds_no_data_once_its_caller_drops_it(loopback):
    """The solver watches a fused solve's outputs (for the turn order and failures) only while they
    run: once done and dropped by their caller, the scheduler forgets them and the workers free them."""
    import dask.array as da
    from distributed import wait

    from daskflow.poisson.distributed import home_chunks

    b = np.asfortranarray(np.random.default_rng(9).standard_normal((8, 12, 16)))
    with _threaded_cluster() as cluster, Client(cluster) as client:
        solver = _poisson("loopback")
        out = solver.solve(da.from_array(b, chunks=home_chunks(solver)))
        name = out.name
        wait(out)
        assert client.run_on_scheduler(_layer_keys, name) == 2  # one block per chunk of (1, 2)
        del out
        deadline = time.monotonic() + 60  # a bound for a broken release, not a speed expectation
        while client.run_on_scheduler(_layer_keys, name):
            assert time.monotonic() < deadline, "the dropped solution is still held on the cluster"
            time.sleep(0.05)


def test_fused_work_waits_for_pending_work_but_not_for_a_failed_submission():
    """The turn a new fused task waits for: the pending work submitted last on its worker, unless that
    submission already failed on another worker (its aborted tasks would pass their error on: a solve
    retried at once after a failure failed with it)."""
    from types import SimpleNamespace

    client = SimpleNamespace(id="turns")

    def future(status):
        return SimpleNamespace(status=status, add_done_callback=lambda fn: None)

    running = {"a": future("pending"), "b": future("pending")}
    transport.took_turn(client, running)
    assert transport.wait_turn(client, ["a", "b"]) == running
    failed = {"a": future("error"), "b": future("pending")}  # "b" not yet told that its peer failed
    transport.took_turn(client, failed)
    assert transport.wait_turn(client, ["a", "b"]) == {}
    transport._LAST_FUSED.pop("turns")


def test_a_solver_goes_on_with_a_new_communicator_after_a_failed_solve(loopback):
    import dask.array as da

    from daskflow.poisson.distributed import home_chunks

    b = np.asfortranarray(np.random.default_rng(6).standard_normal((8, 12, 16)))
    with _threaded_cluster() as cluster, Client(cluster) as client:
        solver = _poisson("loopback")
        first = solver.solve(da.from_array(b, chunks=home_chunks(solver), name=False)).compute()
        shared = next(iter(solver._cluster_states.values())).communicator(client)
        _inject_failure(client, "daskflow.poisson.algorithms", "ptdma", worker=0)  # one process
        with pytest.raises(RuntimeError, match="injected"):
            solver.solve(da.from_array(b, chunks=home_chunks(solver), name=False)).compute()
        again = solver.solve(da.from_array(b, chunks=home_chunks(solver), name=False)).compute()
        replaced = next(iter(solver._cluster_states.values())).communicator(client)
        assert replaced.key != shared.key  # a new communicator
        assert not any(client.run(transport.comm_alive, shared.key).values())  # retired everywhere
    np.testing.assert_array_equal(again, first)


def _count_exchanges(monkeypatch) -> dict:
    """Exchanges made by the executors of this process, by the cut that feeds them."""
    from daskflow.pencils import direct

    counts: dict = {}
    original = direct.DirectExecutor.exchange

    def exchange(self, blocks, dests, sources, cut, join, extras=(), site=None, collective=False):
        if self.me == min(self.owner(d) for d in dests):  # one worker's count
            name = getattr(cut, "__qualname__", "").replace("solve_distributed.<locals>.<lambda>", "z solve rows")
            counts[name] = counts.get(name, 0) + 1
        return original(self, blocks, dests, sources, cut, join, extras, site, collective)

    monkeypatch.setattr(direct.DirectExecutor, "exchange", exchange)
    return counts


@pytest.mark.parametrize(("pencils", "rounds", "halos"), [((2, 2), 21, 9), ((4, 1), 12, 6)])
def test_the_exchange_rounds_of_a_step(monkeypatch, pencils, rounds, halos):
    """The rounds of one z-implicit, flow-rate-forced step on a cluster (docs/performance.md lists
    them): three halos a substep (the CFL maximum and the bulk velocity ride on two of them; at
    (n, 1) the pressure's rows come with its y->x transpose instead of a third), the pressure
    solve's transposes and, at pz = 2, the reduced rows' all-gather, and with pz > 1 one round for
    the three velocity components' z-implicit solves together."""
    with LocalCluster(n_workers=4, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        sim = Simulation(_channel(pencils), client=client).run(steps=1)
        counts = _count_exchanges(monkeypatch)
        sim.run(steps=2)
    per_step = {k: v / 2 for k, v in counts.items()}
    assert sum(per_step.values()) == rounds, per_step
    halo_cuts = [name for name in per_step if name.startswith("exchange.<locals>")]  # pencils.halo.exchange's cuts
    assert sum(per_step[name] for name in halo_cuts) == halos
    assert per_step.get("z solve rows", 0) == (3 if pencils[1] > 1 else 0)


def test_nccl_needs_a_gpu_per_worker(monkeypatch):
    """Workers that share a GPU (more pencils than GPUs on a local GPU cluster) cannot be NCCL ranks
    of one communicator: ``auto`` gives them the mailbox, and asking for ``nccl`` names the setting."""
    from daskflow.pencils import nccl

    with _threaded_cluster() as cluster, Client(cluster) as client:
        workers = sorted(client.scheduler_info()["workers"])
        monkeypatch.setattr(nccl, "device_id", lambda: "0000:1b:00.0")  # one GPU for both
        assert choose_comm(client, workers, "auto", "gpu") == "mailbox"
        with pytest.raises(ValueError, match=r"config cluster.comm: 'nccl' needs one GPU per worker"):
            choose_comm(client, workers, "nccl", "gpu")
        monkeypatch.setattr(nccl, "device_id", lambda dask_worker=None: dask_worker.address)  # one GPU each
        assert choose_comm(client, workers, "auto", "gpu") == "nccl"
        assert choose_comm(client, workers, "auto", "cpu") == "mailbox"


def test_a_finished_turn_does_not_forget_the_one_submitted_after_it():
    """A done callback (the client's callback thread) forgets a finished turn only while it is still
    the last one on its worker; fused work submitted in between (the caller's thread) is kept, or the
    next solve there would not wait for it and their exchanges would mix on the shared communicator."""
    from types import SimpleNamespace

    client = SimpleNamespace(id="turn-race")
    callbacks = []

    def future():
        return SimpleNamespace(status="pending", add_done_callback=callbacks.append)

    first, second = future(), future()
    submitting = []

    class SubmitsMeanwhile(dict):
        def get(self, *args):
            value = super().get(*args)
            if not submitting:  # the caller's next submission comes while the callback checks
                submitting.append(threading.Thread(target=transport.took_turn, args=(client, {"a": second})))
                submitting[0].start()
                submitting[0].join(0.2)
            return value

    transport._LAST_FUSED[client.id] = SubmitsMeanwhile()
    try:
        transport.took_turn(client, {"a": first})
        first.status = "finished"
        callbacks[0](first)  # the first is done
        submitting[0].join()  # the submission, once the callback has let go of the lock
        assert transport.wait_turn(client, ["a"]) == {"a": second}
    finally:
        transport._LAST_FUSED.pop(client.id)


def test_window_pools_that_make_the_same_takes_and_gives_pair_their_windows():
    """One-sided copies write into the peer's window that pairs with the sender's own: every rank's
    pool, given the same sequence of takes and gives, hands out the same windows."""
    sequence = [("take", 4096), ("take", 8192), ("give", 0), ("take", 4096), ("give", 1), ("give", 2),
                ("take", 8192), ("take", 4096), ("take", 12288)]
    handed = []
    for _ in range(2):
        pool, held, out = HostWindows(), [], []
        for op, value in sequence:
            if op == "take":
                held.append(pool.take(value))
                out.append((pool.windows.index(held[-1]), held[-1].nbytes))
            else:
                pool.give(held[value])
        handed.append(out)
    assert handed[0] == handed[1]
    # a window goes to the smallest free one that fits: the 4096 given back serves the next 4096
    assert [window for window, _ in handed[0]] == [0, 1, 0, 1, 0, 2]
    assert all(nbytes >= value for (_, nbytes), (_, value) in zip(handed[0], [s for s in sequence if s[0] == "take"],
                                                                   strict=True))


def test_ipc_window_flags_lie_past_the_data_one_word_per_peer_and_kind():
    from daskflow.pencils import ipc

    window = ipc.IpcWindow(recv=None, nbytes=3 * 8192, base=1 << 20, peer_base={1: 2 << 20, 2: 3 << 20}, size=3)
    for base in (window.base, *window.peer_base.values()):
        words = [window.flag(base, kind, rank) for kind in ("arrived", "ready") for rank in range(3)]
        assert len(set(words)) == 6 and all(word % ipc.FLAG_BYTES == 0 for word in words)
        assert min(words) == base + window.nbytes  # after the ranks' slots, inside the same allocation
        assert max(words) + ipc.FLAG_BYTES <= base + copy_engine.align(window.nbytes + 6 * ipc.FLAG_BYTES,
                                                                        copy_engine.SLOT_ALIGN)


def test_an_ipc_wait_that_raises_still_gives_its_window_back(monkeypatch):
    """A wait given up (a capture invalidated on one rank) returns the window all the same, so this
    rank's pool keeps pairing with its peers' for the exchanges that follow."""
    from daskflow.pencils import ipc

    def fail(*_):
        raise RuntimeError("cuStreamWaitValue32: CUDA driver error 900")

    monkeypatch.setattr(ipc, "wait_value", fail)
    engine = ipc.IpcEngine.__new__(ipc.IpcEngine)  # no device: only its pool
    copy_engine.WindowPool.__init__(engine)
    window = ipc.IpcWindow(recv=None, nbytes=8192, base=1 << 20, peer_base={1: 2 << 20}, size=2)
    with pytest.raises(RuntimeError, match="error 900"):
        engine.wait(ipc.IpcToken(window, [1], [], []), compute=None)
    assert engine._free == [window]
