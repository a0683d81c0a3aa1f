"""P-TDMA's local reduction and reconstruction of one chunk on one GPU: per-column coefficients
recomputed by the kernels against the same coefficients set up on the host and uploaded as
``(m, ncols)`` arrays (what the kernels read before). Prints one JSON document with the device name:
ms per reduce + reconstruct, whether the two give the same bits, and the coefficient bytes each
keeps on the device.

    python benchmarks/ptdma_kernels.py [--rows 512] [--columns 131584] [--repeat 10]

The defaults are one z-chunk of a 512^3-per-GPU (1, 4) Poisson solve (512 rows, 257 x 512 spectral
columns, complex128).
"""

from __future__ import annotations

import argparse

import numpy as np
from emit import emit, event_seconds


def measure(cupy, rows: int, columns: int, repeat: int) -> dict:
    from daskflow import tridiagonal

    rng = np.random.default_rng(0)
    lower, upper = rng.uniform(0.2, 1, rows), rng.uniform(0.2, 1, rows)
    diag = -(lower + upper) - 0.3
    shift = -rng.uniform(0, 2, columns)
    chunks = {"recomputed": tridiagonal.precompute(lower, diag, upper, cupy.asarray(shift)),
              "arrays": tridiagonal.precompute(lower, diag, upper, shift).to(cupy)}
    d0 = cupy.asarray(rng.standard_normal((rows, columns)) + 1j * rng.standard_normal((rows, columns)))
    first = cupy.asarray(rng.standard_normal(columns) + 0j)
    last = cupy.asarray(rng.standard_normal(columns) + 0j)
    out = {"rows": rows, "columns": columns, "data_gb": d0.nbytes / 1e9}
    results = {}
    for name, chunk in chunks.items():
        d = d0.copy()

        def solve(d=d, chunk=chunk):
            tridiagonal.reduce(d, chunk)
            tridiagonal.reconstruct(d, first, last, chunk)

        out[f"ms_{name}"] = 1e3 * event_seconds(cupy, solve, repeat, warmup=2)
        out[f"coefficient_bytes_{name}"] = int(sum(v.nbytes for v in chunk if v is not None))
        results[name] = d0.copy()
        solve(results[name], chunk)
    out["bits_equal"] = bool((results["recomputed"] == results["arrays"]).all())
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--columns", type=int, default=257 * 512)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    import cupy

    from daskflow.backend import device_name

    emit({"benchmark": "ptdma_kernels", "device": device_name(cupy),
          "run": measure(cupy, args.rows, args.columns, args.repeat)})


if __name__ == "__main__":
    main()
