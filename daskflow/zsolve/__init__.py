"""The z solves, in one layer: every tridiagonal solve along z of the Poisson/Helmholtz systems and
of the z-implicit diffusion, in one chunk or across the ``pz`` chunks of a column group.

* :mod:`~daskflow.zsolve.choice`: which solve a decomposition runs (local Thomas, P-TDMA or FTM)
  and how P-TDMA's reduced systems travel;
* :mod:`~daskflow.zsolve.group`: the reduced system of a column group (the boundary rows each
  chunk contributes, their place in it, its factorisation);
* :mod:`~daskflow.zsolve.spectral`: one matrix per (kx, ky) wavenumber (the z operator shifted by
  the x/y eigenvalues), time-invariant: set up once, run as executor stages between the transforms;
* :mod:`~daskflow.zsolve.shared`: one matrix for every column (the z-implicit diffusion, which
  changes with ``dt``), the three velocity components sharing their exchange rounds.

Both flavours are the seed paper's parallel tridiagonal method (local cyclic reduction, reduced
system of the boundary rows, reconstruction) on the kernels of :mod:`daskflow.tridiagonal`.
"""
