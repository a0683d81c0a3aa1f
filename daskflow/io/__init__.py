"""Run output: the Zarr store contract (``store``: creation and checkpoints, with the stored
variables in ``layout``, where a store lives and what readers see in ``access`` and the time records
in ``records``) and the writer called from the time loop (``output``)."""
