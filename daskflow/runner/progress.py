"""What a run shows as it goes and when it stops on its own: the line saying what runs, the progress
line after each segment, and the checks that the flow is still trustworthy."""

from __future__ import annotations

import math
import time

from daskflow.run_config import RunConfig
from daskflow.runner.console import CONSOLE

CFL_LIMIT = 1.05 * math.sqrt(3)  # RK3's advective stability limit is sqrt(3) (time.cfl = 1 runs at it)
DIVERGENCE_LIMIT = 1e-6


def run_header(sim, cfg: RunConfig, log: str | None = None) -> str:
    """One line saying what runs: grid, viscosity and Reynolds number, pencils and solver (as the
    simulation chose them), device, store (and log) and how far."""
    g, t, s = cfg.grid, cfg.time, sim.config.solver
    nu = cfg.physics.nu
    goal = f"to t = {t.end_time:g}" if t.end_time is not None else f"to step {sim.first_step + t.steps}"
    return (f"daskflow run: {'x'.join(map(str, g.shape))} cells, lengths {list(g.lengths)}, nu {nu:g} "
            f"(1/nu = {1 / nu:.4g}), pencils {list(s.pencils)} {s.poisson}, {sim.where}, "
            f"store {sim.store or 'none'}{f' (log {log})' if log else ''}, from step {sim.step} {goal}")


class Segments:
    """Steps per run segment (one progress line each): ``first``, then as many as make a segment last
    about :attr:`SECONDS` at the rate just measured, growing or shrinking at most fourfold at a
    time. A segment has a fixed cost (its tasks, the output's commit, the line's diagnostics), which
    a fast host would otherwise pay every few tens of milliseconds of stepping. ``fixed``
    (``--report-every``) keeps every segment at that length."""

    SECONDS = 2.0

    def __init__(self, first: int, fixed: bool = False) -> None:
        self.steps, self.fixed = max(1, first), fixed

    def done(self, steps: int, seconds: float) -> None:
        """A segment of ``steps`` steps took ``seconds``: size the next one."""
        if self.fixed or steps <= 0 or seconds <= 0:
            return
        wanted = steps * self.SECONDS / seconds
        self.steps = max(1, int(min(4 * steps, max(steps / 4, wanted))))


class Progress:
    """The progress line after each segment: rate over the last segments, ETA as h:mm:ss."""

    WINDOW = 5  # segments the rate is averaged over

    def __init__(self, sim, last: int | None, until: float | None) -> None:
        self.sim, self.last, self.until = sim, last, until
        self.marks = [(time.perf_counter(), sim.step)]

    def line(self, diag: dict) -> None:
        sim = self.sim
        self.marks = [*self.marks[-self.WINDOW:], (time.perf_counter(), sim.step)]
        (t0, s0), (t1, s1) = self.marks[0], self.marks[-1]
        rate = (s1 - s0) / max(t1 - t0, 1e-9)
        left = (self.last - sim.step) if self.last is not None else (self.until - sim.time) / max(sim.dt, 1e-300)
        eta = time.strftime("%H:%M:%S", time.gmtime(max(left, 0) / rate)) if rate > 0 else "--:--:--"
        text = (f"step {sim.step}  t {sim.time:.4f}  dt {sim.dt:.3e}  CFL {diag['cfl']:.2f}  "
                f"Re_tau {diag['re_tau']:.1f}  div {diag['div_max']:.1e}  Ub {diag['bulk_velocity']:.4f}  "
                f"{rate:.1f} steps/s  ETA {eta}")
        CONSOLE.progress(text)


def blow_up(diag: dict) -> str | None:
    """Why the flow is no longer trustworthy (NaN/Inf, CFL or divergence beyond their limits), or None."""
    if not all(value == value and abs(value) != float("inf") for value in diag.values()):
        return "NaN or Inf in the fields"
    if diag["cfl"] > CFL_LIMIT:
        return f"CFL {diag['cfl']:.2f} beyond {CFL_LIMIT}"
    if diag["div_max"] > DIVERGENCE_LIMIT:
        return f"max |div u| {diag['div_max']:.2e} beyond {DIVERGENCE_LIMIT}"
    return None
