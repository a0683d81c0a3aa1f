"""A mirror link: one rank of a pencil decomposition whose every peer is its mirror image.

:class:`MirrorLink` answers each exchange with what this rank sent: the header and the device
pieces received from peer ``p`` are copies of those sent to ``p``. In a decomposition whose chunks
are all the same size in every layout (:func:`check_even`: y, z and the spectral x and y split
evenly) every piece a rank receives has the layout of one it sends, so one process can run a
single pencil's fused task (halos, reductions, transposes and reduced systems included) exactly as
a cluster worker does under the packed protocol (:class:`~daskflow.pencils.packed.PackedTransport`):
the same kernels on the same shapes, the same pieces cut and joined, a step captured as a CUDA graph
as on the workers, only with local copies where the wire would be. What it measures on one GPU is
the decomposition's own cost: a pencil's step against the one-GPU step of the same points, without
the transfers or the peers' waits (``benchmarks/pencil_floor.py``).

The values are not a simulation's: a piece from a peer is this rank's own piece for it, so the
fields a mirrored pencil computes are not those of any decomposed run. Only the work is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from daskflow.backend import cupy_or_none
from daskflow.pencils.executor import Member
from daskflow.pencils.layout import Decomposition
from daskflow.pencils.link import exchange_timeout
from daskflow.pencils.packed import PackedTransport


class MirrorLink:
    """The :class:`~daskflow.pencils.link.Link` of a rank whose peers mirror it. Device pieces are
    the arrays of ``xp`` (CuPy on a GPU: posted copies run on a stream of their own after what the
    compute stream queued, as NCCL's posted payloads do; NumPy: copied at once)."""

    overlaps = True  # payload_post returns before the pieces are copied (on a GPU)

    def __init__(self, xp) -> None:
        self.xp = xp
        self.on_gpu = xp is cupy_or_none()
        self.capturable = self.on_gpu  # copies on CUDA streams: a stream capture records them
        self._transfer = xp.cuda.Stream(non_blocking=True) if self.on_gpu else None

    def header_round(self, send: dict[int, bytes], recv_from: Sequence[int], abort: Callable[[], bool],
                     timeout: float) -> dict[int, bytes]:
        missing = sorted(set(recv_from) - set(send))
        if missing:
            raise ValueError(f"mirror link: pieces expected from ranks {missing}, which this rank sends nothing to; "
                             "a mirrored exchange must be symmetric")
        return {peer: send[peer] for peer in recv_from}

    def payload_round(self, sends: list[tuple[int, Any]], recvs: list[tuple[int, Any]], abort: Callable[[], bool],
                      timeout: float) -> None:
        self._copy(sends, recvs)

    def payload_post(self, sends: list, recvs: list):
        """The copies on the transfer stream, after what the compute stream queued; returns the
        event :meth:`payload_wait` waits for (``None`` without a GPU: copied already)."""
        if not self.on_gpu:
            self._copy(sends, recvs)
            return None
        cupy = self.xp
        queued = cupy.cuda.Event(block=False, disable_timing=True)
        queued.record(cupy.cuda.get_current_stream())
        self._transfer.wait_event(queued)
        with self._transfer:
            self._copy(sends, recvs)
        moved = cupy.cuda.Event(block=False, disable_timing=True)
        moved.record(self._transfer)
        return moved

    def payload_wait(self, moved) -> None:
        if moved is not None:
            self.xp.cuda.get_current_stream().wait_event(moved)

    def _copy(self, sends: list, recvs: list) -> None:
        """Into the ``k``-th buffer received from a peer, the bytes of the ``k``-th sent to it."""
        sent: dict[int, list] = {}
        for peer, buf in sends:
            sent.setdefault(peer, []).append(buf)
        taken: dict[int, int] = {}
        for peer, buf in recvs:
            k = taken[peer] = taken.get(peer, -1) + 1
            mine = sent.get(peer, [])
            if k >= len(mine) or mine[k].nbytes != buf.nbytes:
                raise ValueError(f"mirror link: buffer {k} from rank {peer} ({buf.nbytes} bytes) has no sent buffer "
                                 "of its size; a mirrored exchange must be symmetric")
            source = mine[k]
            if self.on_gpu:
                buf.data.copy_from_device_async(source.data, buf.nbytes)
            else:
                buf.reshape(-1, order="A").view("u1")[...] = source.reshape(-1, order="A").view("u1")

    def empty(self, shape: tuple, dtype: str, order: str):
        return self.xp.empty(shape, dtype=dtype, order=order)

    def is_device(self, x) -> bool:
        return isinstance(x, self.xp.ndarray)

    def abort(self) -> None:
        pass  # nothing waits on a peer


def check_even(decomposition: Decomposition) -> None:
    """Raise ``ValueError`` unless every range of ``decomposition``'s layouts has the same length
    (physical y and z, spectral x and y): a mirrored rank's pieces then have its peers' layouts."""
    for name in ("y", "z", "xs", "ys"):
        lengths = {r.stop - r.start for r in getattr(decomposition, name)}
        if len(lengths) > 1:
            raise ValueError(f"mirrored pencils need even splits: the {name} ranges of pencils {decomposition.pencils} "
                             f"of {decomposition.shape} (spectral {decomposition.spectral}) have lengths "
                             f"{sorted(lengths)}; choose a grid whose ny, nz and nx // 2 + 1 divide by the pencils")


def mirrored_member(decomposition: Decomposition, xp, run_id: str = "mirror") -> Member:
    """The :class:`~daskflow.pencils.executor.Member` of rank 0 of ``decomposition`` (even splits,
    :func:`check_even`) over a :class:`MirrorLink` of array module ``xp``: a pencil's fused-task
    code in one process, its peers mirrored."""
    check_even(decomposition)
    workers = [f"mirror-{rank}" for rank in range(decomposition.py * decomposition.pz)]
    ranks = {worker: rank for rank, worker in enumerate(workers)}
    transport = PackedTransport("mirror", MirrorLink(xp), ranks, workers[0], exchange_timeout(), lambda run: False)
    return Member(workers[0], workers, decomposition.pz, transport, run_id, scope=run_id)


__all__ = ["MirrorLink", "check_even", "mirrored_member"]
