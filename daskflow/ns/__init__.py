"""Incompressible Navier–Stokes on the staggered grid: boundary conditions of the velocity
(:mod:`~daskflow.ns.boundaries`), operators and their GPU/CPU kernels, initial states, the Wray RK3
projection stepper, and the domains it runs on (the whole array in process, or one pencil per
worker inside a fused task: :mod:`~daskflow.ns.domain`, :mod:`~daskflow.ns.distributed`)."""
