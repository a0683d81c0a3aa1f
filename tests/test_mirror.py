"""The mirror link: one pencil's fused-task code in one process, its peers answered with its own pieces."""

import os

import numpy as np
import pytest

from daskflow import Simulation
from daskflow.ns import runs
from daskflow.pencils import wire
from daskflow.pencils.executor import DirectExecutor
from daskflow.pencils.layout import Decomposition
from daskflow.pencils.mirror import MirrorLink, check_even, mirrored_member
from daskflow.pencils.packed import PackedTransport
from tests.helpers import ROOT, benchmark_module


def _transport() -> PackedTransport:
    ranks = {f"w{i}": i for i in range(3)}
    return PackedTransport("mirror", MirrorLink(np), ranks, "w0", 5.0, lambda run: False)


def _pieces(d: int) -> dict:
    return {"face": np.full((4, 2), 10.0 + d, order="F"), "rows": np.arange(6.0).reshape(2, 3) + d}


@pytest.mark.parametrize("site", [None, "halo"])
def test_a_mirrored_rank_receives_from_each_peer_a_copy_of_what_it_sent_it(site):
    transport = _transport()
    for call in range(3):  # a fixed-layout site describes its pieces once, then posts payloads alone
        sent = {d: _pieces(d + call) for d in (1, 2)}
        outgoing = [(f"w{d}", ("x", 0, d), piece) for d, piece in sent.items()]
        outgoing.append(("w0", ("x", 0, 0), _pieces(-1)))
        incoming = [(f"w{s}", ("x", s, 0)) for s in (1, 2)]
        got = transport.exchange(outgoing, incoming, "run", site=site)
        for s in (1, 2):
            piece = got[("x", s, 0)]
            for name, array in sent[s].items():
                np.testing.assert_array_equal(piece[name], array)
                assert piece[name] is not array and piece[name].flags.f_contiguous == array.flags.f_contiguous
        np.testing.assert_array_equal(got[("x", 0, 0)]["face"], _pieces(-1)["face"])


def test_host_values_come_back_as_sent_and_an_asymmetric_exchange_is_refused():
    transport = _transport()
    got = transport.exchange([("w1", ("r", 0, 1), 2.5)], [("w1", ("r", 1, 0))], "run")
    assert got[("r", 1, 0)] == 2.5
    with pytest.raises(ValueError, match="ranks \\[2\\].*symmetric"):
        transport.exchange([("w1", ("r", 0, 1), np.ones(3))], [("w2", ("r", 2, 0))], "run")


def test_a_buffer_without_a_sent_one_of_its_size_is_refused():
    link = MirrorLink(np)
    with pytest.raises(ValueError, match="buffer 0 from rank 1 .*24 bytes"):
        link.payload_round([(1, np.ones(2))], [(1, np.empty(3))], lambda: False, 1.0)


def test_only_even_splits_can_be_mirrored():
    check_even(Decomposition((30, 32, 16), (16, 32), (2, 1)))
    with pytest.raises(ValueError, match=r"xs ranges of pencils \(2, 1\).*\[8, 9\].*nx // 2 \+ 1"):
        mirrored_member(Decomposition((32, 32, 16), (17, 32), (2, 1)), np)
    with pytest.raises(ValueError, match=r"the z ranges .*\[5, 6\]"):
        check_even(Decomposition((30, 32, 11), (16, 32), (1, 2)))


def _exchanges_of_rank_0(monkeypatch, me: str) -> list:
    """Every exchange rank ``me`` makes from now on: its site and the layouts of the arrays it gets
    (shapes, dtypes and memory orders, :func:`~daskflow.pencils.wire.device_layouts`; a mirrored
    halo's faces come labelled with the directions this rank sent them in)."""
    made, send = [], DirectExecutor._send

    def recorded(self, blocks, dests, sources, cut, site, post, collective=False, joined=False):
        xid, received = send(self, blocks, dests, sources, cut, site, post, collective, joined)
        if self.me == me:
            specs = [wire.flatten(v, lambda x: isinstance(x, np.ndarray))[0] for v in received.values()]
            made.append((site, collective, sorted(map(repr, (wire.device_layouts(s) for s in specs)))))
        return xid, received

    monkeypatch.setattr(DirectExecutor, "_send", recorded)
    return made


@pytest.mark.parametrize("pencils", [(2, 1), (2, 2)])
def test_a_mirrored_pencil_makes_the_exchanges_of_its_decomposed_run(monkeypatch, pencils):
    """Rank 0 over a mirror link exchanges as rank 0 of a team of the same decomposition does, step
    for step: the same sites, pieces and shapes (the mirror changes the values, not the work)."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))  # its own imports
    floor = benchmark_module("pencil_floor")
    config = {"grid": {"shape": [30, 8 * pencils[0], 8 * pencils[1]], "lengths": [4.0, 2.0, 2.0], "z_stretch": 1.5},
              "physics": {"nu": 0.01, "forcing": {"kind": "flow_rate", "value": [1.0, 0.0]}},
              "boundaries": {"preset": "channel"}, "initial": {"kind": "turbulent_channel", "amplitude": 0.3},
              "time": {"dt": 0.01, "implicit_diffusion": "z"},
              "solver": {"poisson": "ptdma", "pencils": list(pencils), "device": "cpu"}}
    sim = Simulation(config)
    start = runs.State(*(a.copy() for a in (sim.state.u, sim.state.v, sim.state.w, sim.state.p)), sim.state.time,
                       sim.state.step, sim.state.dt, [], sim.state.forcing_gradient)
    team = _exchanges_of_rank_0(monkeypatch, "team-0")
    sim.run(steps=2)
    stepper = floor.mirrored_stepper(sim._flow_plan, np)
    state = floor.pencil_state(stepper, start)
    mirror = _exchanges_of_rank_0(monkeypatch, "mirror-0")
    runs.advance_pencil(sim._flow_plan, stepper, state, 2, None)
    assert len(team) > 10 and mirror == team
    assert state.step == 2 and state.u.shape == (30, 8, 8)
