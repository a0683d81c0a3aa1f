"""Any decomposition in one process: a team of threads runs the flow domain a cluster runs, with
halos (faces, edges, corners, walls), transposes, reduced systems and reductions, and every
exchange counted."""

import copy
import os
import threading

import numpy as np
import pytest
from distributed import Client, LocalCluster

from daskflow import Simulation
from daskflow.backend import to_numpy
from daskflow.pencils.link import PeerAborted
from daskflow.pencils.team import Board, Team
from tests.helpers import CHANNEL as BASE_CHANNEL
from tests.helpers import FLOW_RATE

CHANNEL = {**BASE_CHANNEL, "physics": {"nu": 0.01, "forcing": FLOW_RATE}}
# walls on y and z: u and w on the upper y wall move, so edges and corners carry non-zero values
DUCT = {**CHANNEL, "boundaries": {"preset": "channel", "u": {"y": "DD", "y_values": [0.0, 0.3]}, "v": {"y": "DD"},
                                  "w": {"y": "DD", "y_values": [0.0, 0.1]}}}


def _config(base: dict, implicit: str, pencils=(1, 1), poisson: str = "ptdma") -> dict:
    cfg = copy.deepcopy(base)
    cfg["time"]["implicit_diffusion"] = implicit
    cfg["solver"] = {"pencils": list(pencils), "poisson": poisson}
    return cfg


def _assert_same_fields(sim, reference, tolerance: float) -> None:
    for name in "uvwp":
        ref = to_numpy(getattr(reference.state, name))
        np.testing.assert_allclose(to_numpy(getattr(sim.state, name)), ref, rtol=0,
                                   atol=tolerance * np.abs(ref).max(), err_msg=name)


@pytest.mark.parametrize("pencils", [(2, 2), (1, 4)], ids=["2x2", "1x4"])
@pytest.mark.parametrize("implicit, poisson", [("z", "ptdma"), ("none", "ftm"), ("xyz", "ptdma")])
def test_in_process_pencils_equal_the_one_pencil_run(pencils, implicit, poisson):
    """20 steps of a channel (walls on z, flow-rate forcing): the team of ``py * pz`` threads gives
    the one-pencil fields to 1e-12 (only the order of sums differs)."""
    reference = Simulation(_config(CHANNEL, implicit)).run(steps=20)
    sim = Simulation(_config(CHANNEL, implicit, pencils, poisson)).run(steps=20)
    assert sim.step == 20 and sim.time == pytest.approx(reference.time, rel=1e-13)
    _assert_same_fields(sim, reference, 1e-12)
    assert sim.divergence_max() < 1e-12


@pytest.mark.parametrize("implicit", ["z", "xyz"])
def test_a_duct_at_2x2_checks_edges_and_corners(implicit):
    """Walls on y and z with moving walls: every pencil has a wall on y and one on z, so the halo
    exchange's edges, corners and wall ghosts all matter."""
    reference = Simulation(_config(DUCT, implicit)).run(steps=10)
    sim = Simulation(_config(DUCT, implicit, (2, 2))).run(steps=10)
    _assert_same_fields(sim, reference, 1e-12)
    assert float(np.abs(to_numpy(sim.state.v)).max()) > 0  # the walls made a three-dimensional flow


def test_the_team_equals_the_cluster_bit_for_bit():
    """The same domain code over two transports: threads in this process and four worker
    processes of a ``LocalCluster`` exchanging over distributed's comms."""
    cfg = _config(CHANNEL, "z", (2, 2))
    team = Simulation(cfg).run(steps=8)
    with LocalCluster(n_workers=4, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        sim = Simulation(cfg, client=client).run(steps=8)
        for name in "uvwp":
            np.testing.assert_array_equal(to_numpy(getattr(sim, name).compute()), to_numpy(getattr(team.state, name)))


def _rounds_per_step(cfg: dict, steps: int = 4, stop=None) -> float:
    sim = Simulation(cfg).run(steps=1)  # set-up rounds (solver factors, first records) are not counted
    transport = sim.stepper.domain.transport  # participant 0's
    before = transport.rounds
    sim.run(steps=steps, stop=stop)
    return (transport.rounds - before) / steps


def test_exchange_rounds_per_step_at_2x2(tmp_path):
    """z-implicit diffusion, flow-rate forcing, P-TDMA, a record of scalars every step (and of
    profiles every tenth): per substep a velocity halo (carrying the CFL maximum on the first), one
    round for the three components' implicit solves, a halo of the intermediate velocity (carrying
    the bulk-velocity sum), the pressure solve (x->y transpose, the reduced rows' all-gather, y->x)
    and the pressure halo, 7 rounds; the scalars record adds a halo and one reduction of every
    value, and a stop request rides on that reduction."""
    cfg = _config(CHANNEL, "z", (2, 2))
    assert _rounds_per_step(cfg) == 21
    cfg["output"] = {"store": os.fspath(tmp_path / "run.zarr"), "scalars_every": 1, "profiles_every": 10}
    with_store = _rounds_per_step(cfg, steps=10, stop=lambda: False)
    assert with_store == 21 + 2 + 2 / 10
    assert with_store <= 24


@pytest.mark.parametrize("pencils", [(2, 1), (3, 1)], ids=["2x1", "3x1"])
def test_the_pressure_rows_come_with_its_transpose(monkeypatch, pencils):
    """At pencils (py, 1) with a periodic y, the pressure solve's y->x transpose brings each chunk
    its neighbours' rows, and the solution is padded without a halo round: 12 rounds per step
    instead of 15, and the fields of the run with the halo round, bit for bit (py = 3: the rows wrap
    around at both ends of y, at different chunks)."""
    from daskflow.ns.domain import FlowDomain

    cfg = _config(CHANNEL, "z", pencils)
    sim = Simulation(cfg).run(steps=6)
    assert sim.stepper.domain.pressure_rows_in_transpose
    assert _rounds_per_step(cfg) == 12
    monkeypatch.setattr(FlowDomain, "pressure_rows_in_transpose", property(lambda self: False))
    reference = Simulation(cfg).run(steps=6)
    for name in "uvwp":
        np.testing.assert_array_equal(to_numpy(getattr(sim.state, name)), to_numpy(getattr(reference.state, name)),
                                      err_msg=name)
    assert _rounds_per_step(cfg) == 15


def test_a_stop_request_is_agreed_by_every_pencil():
    """A stop request seen by one participant's callable only (the first to ask) ends the run for
    all of them after the same step."""
    calls = []
    lock = threading.Lock()

    def stop() -> bool:
        with lock:
            calls.append(1)
            return len(calls) == 13  # one participant, in the fourth step (four ask once per step)

    sim = Simulation(_config(CHANNEL, "z", (2, 2))).run(steps=50, stop=stop)
    assert sim.step == 4


def test_a_failing_participant_aborts_the_others():
    team = Team(3, timeout=60)

    def body(i):
        if i == 1:
            raise ValueError("participant 1 failed")
        return team.transports[team.members[i]].exchange([], [("team-1", ("x", 1))], "run")

    with pytest.raises(ValueError, match="participant 1 failed"):
        team.run(body)
    assert team.run(lambda i: i * 2) == [0, 2, 4]  # the board is ready for the next run


def test_the_board_copies_pieces_and_names_what_is_missing():
    board = Board()
    piece = np.arange(4.0)
    from daskflow.pencils.team import TeamTransport

    transport = TeamTransport(board, timeout=0.01)
    out = transport.exchange([("b", "tag", {"a": piece})], [("b", "tag")], "run")
    piece[:] = -1  # the sender reuses its buffer
    np.testing.assert_array_equal(out["tag"]["a"], [0.0, 1.0, 2.0, 3.0])
    with pytest.raises(TimeoutError, match="were not posted"):
        transport.exchange([], [("b", "other")], "run")
    board.abort()
    with pytest.raises(PeerAborted):
        transport.exchange([], [("b", "other")], "run")


def test_a_device_value_rides_the_halo_as_a_host_number_does():
    """A 0-d array (how a GPU keeps a sum without waiting for it) travels with the halo's faces and
    comes back combined on its device, equal to the host path's number; the faces are the same."""
    sim = Simulation(_config(CHANNEL, "z", (2, 2)))
    pencils = sim._local_pencils()

    def body(stepper, pencil):
        fields, rank = [pencil.u, pencil.v, pencil.w], float(sum(stepper.domain.key) + 1)
        host = stepper.domain.pad_and_reduce(fields, rank, "sum")
        device = stepper.domain.pad_and_reduce(fields, np.asarray(rank), "max")
        return host, device

    for (host_padded, host_sum), (device_padded, device_max) in pencils.call(body, sim.state):
        assert isinstance(host_sum, float) and host_sum == 1 + 2 + 2 + 3
        assert type(device_max) is not float and np.ndim(device_max) == 0 and float(device_max) == 3
        for a, b in zip(host_padded, device_padded, strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("pencils", [(2, 2), (2, 1), (1, 2), (3, 2)])
def test_halo_pieces_cut_beforehand_arrive_as_the_exchanges_cuts(pencils):
    """A halo round whose pieces were cut before the padding (every offset a pencil sends:
    ``halo.sent``) and handed over in two halves (``halo.post``, ``halo.complete``) delivers the
    faces and edges, and the values riding along, that the one-call round cuts from the padded
    stack; with one pencil across a periodic y a pencil is its own neighbour."""
    from daskflow.ns import halos
    from daskflow.pencils import halo

    sim = Simulation(_config(DUCT if pencils == (3, 2) else CHANNEL, "z", pencils))

    def body(stepper, pencil):
        domain = stepper.domain
        counts = tuple(domain.counts)
        names, fields, bcs = domain._velocity_blocks([pencil.u, pencil.v, pencil.w], None)
        _, block, _ = halos.prepare([fields[n] for n in names], [bcs[n] for n in names])
        rank = np.asarray(float(sum(domain.key) + 1))
        once, values = halo.exchange(domain.ex, domain.dec, domain.key, domain.periodic_yz, block, rank)
        packed = {o: halo.cut(domain.key, block, halo.neighbour(domain.key, (-o[0], -o[1]), counts,
                                                                 domain.periodic_yz), counts, domain.periodic_yz)[o]
                  for o in halo.sent(domain.key, counts, domain.periodic_yz)}
        posted = halo.post(domain.ex, domain.dec, domain.key, domain.periodic_yz, packed, rank)
        return once, values, halo.complete(domain.ex, posted)

    for once, values, (twice, again) in sim._local_pencils().call(body, sim.state):
        assert sorted(once) == sorted(twice)
        for offset, piece in once.items():
            np.testing.assert_array_equal(twice[offset], piece)
        assert [float(v) for v in again] == [float(v) for v in values]
