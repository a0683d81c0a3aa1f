"""Which z solve a decomposition runs, chosen in one place.

With ``pz = 1`` every chunk holds whole z columns: a local Thomas solve, whatever the method. With
``pz > 1`` the method decides: ``"ftm"`` transposes the columns whole into z-pencils, ``"ptdma"``
solves them where they are (local reduction, reduced system of the boundary rows, reconstruction).
"""

from __future__ import annotations

from dataclasses import dataclass

LOCAL, PTDMA, FTM = "local", "ptdma", "ftm"


@dataclass(frozen=True)
class ZSolve:
    """The z solve of a decomposition with ``pz`` z-chunks: ``kind`` is ``"local"``, ``"ptdma"``
    or ``"ftm"``."""

    kind: str
    pz: int

    @classmethod
    def of(cls, method: str, pz: int) -> ZSolve:
        """The solve ``method`` (``"ptdma"`` or ``"ftm"``) comes to on ``pz`` z-chunks."""
        if method not in (PTDMA, FTM):
            raise ValueError(f"z solve method must be {PTDMA!r} or {FTM!r}, not {method!r}")
        return cls(LOCAL if pz == 1 else method, pz)

    @property
    def gathers(self) -> bool:
        """Whether a participant gathers all boundary rows of its column group and solves every
        reduced system itself (one round) rather than sending them to the chunk that owns their
        slice of columns and receiving the solutions back (two rounds, each participant moving
        ``2/pz`` of the all-gather's bytes). At ``pz = 2`` both move the same bytes."""
        return self.pz <= 2
