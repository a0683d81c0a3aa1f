"""Validation campaign: runs that compare daskflow with analytic solutions and reference data.

Each case module (named in :data:`CASES`) has the same interface:

* ``run(data_dir, **options)`` runs the case (the real CLI writing Zarr stores, or
  :class:`daskflow.Simulation` in process) and reduces every run to small CSV / JSON files in
  ``data_dir``;
* ``figures(data_dir, fig_dir)`` draws the figures (PNG) from those files only, returns their paths;
* ``table(data_dir)`` returns a markdown table of the case's numbers.

``python -m daskflow.validation figures`` redraws every figure and prints every table from the
committed data (``docs/validation/data``, shipped in the package as well: :mod:`daskflow.data`);
``python -m daskflow.validation run CASE`` reruns a case (see :mod:`daskflow.validation.__main__` for
where each command reads and writes).
"""

CASES = ("laminar", "taylor_green", "cavity", "channel")


def save_figure(fig, path, dpi: int | None = None):
    """Write ``fig`` to ``path`` (PNG) and release it; returns ``path``."""
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path

