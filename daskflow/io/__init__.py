"""Run output: the Zarr store contract (``store``) and the writer called from the time loop
(``output``)."""
