"""CUDA kernels that solve tridiagonal systems along the rows of a C-ordered field ``(nrows, stride)``,
each row's first ``m`` values one system (a C-ordered field solved along z, with no transposed copy
of it): Thomas's sweeps and P-TDMA's local reduction and reconstruction, for one matrix shared by
every row. One warp takes 32 rows and stages tiles of a few values x 32 rows through shared memory,
so that global reads and writes run along the rows (coalesced) while each thread sweeps its own
row in the tile. Launched by :func:`daskflow.tridiagonal.kernels.launch` in blocks of a few warps
(:data:`GEOMETRY`); real types only (shared memory of a complex type would need a constructor)."""

from __future__ import annotations

# Each kernel's tile geometry (overridable per launch: benchmarks/row_kernels.py sweeps them): VALUES
# values of a row per tile, WARPS warps per block, each with its own tile, and global loads in
# batches of BATCH instructions (TILES). Measured on an H200 over a 510 x 256 x 144 float64 pencil.
GEOMETRY = {
    "thomas_uniform_rows": {"VALUES": 32, "WARPS": 1, "BATCH": 16},
    "cr_reduce_rows": {"VALUES": 32, "WARPS": 1, "BATCH": 8},
    "cr_reconstruct_rows": {"VALUES": 16, "WARPS": 4, "BATCH": 16},
}

# The helpers every kernel below starts with; T and R are the preamble's types.
TILES = r"""
// The tiles of the _rows kernels: values k0..k0+kn-1 (kn <= VALUES) of up to 32 rows of a (rows,
// stride) block through shared memory, every row read and written along itself by the lanes of one
// warp, 32 / VALUES rows per instruction. Each warp takes rows row0..row0+rows-1 of d, which start at
// base. Tiles of 16 values (not 32) let twice as many warps share a multiprocessor's shared memory,
// and a 144-value chunk fills nine of them exactly. Global loads go in batches of B instructions
// before their values are stored anywhere: a load right after a store may read what the store wrote
// (the compiler cannot tell shared from global behind a pointer), so one at a time each would wait
// the memory's full latency. B trades that latency against registers.
#define LANE_ROWS (32 / VALUES)
#define ROW_TILES(nrows) \
    __shared__ T tiles[WARPS][32][VALUES + 1]; \
    const int lane = threadIdx.x % 32; \
    const int warp = WARPS == 1 ? 0 : threadIdx.x / 32; /* a constant tile where it can be */ \
    T (*tile)[VALUES + 1] = tiles[warp]; \
    const long long row0 = (blockIdx.x * (long long)WARPS + warp) * 32LL; \
    const int rows = (int)max(0LL, min(32LL, (nrows) - row0)); \
    T* base = d + row0 * stride
// A warp's own copy of n coefficient arrays of VALUES values, c[0]..c[n-1].
#define COEFFICIENTS(n) __shared__ R coefficients[WARPS][n][VALUES]; R (*c)[VALUES] = coefficients[warp]
// The addend's rows of this warp (nullptr where there is none, adding == 0).
#define ADDED_ROWS(addend, adding) ((adding) ? (addend) + row0 * stride : nullptr)
// Coefficient src[k0 + lane + shift] of the tile's rows into shared memory (where it exists), read by
// every lane in the sweep; published by load_tile's __syncwarp.
#define STAGE(dst, src, shift) \
    if (lane < kn && k0 + lane + (shift) >= 0 && k0 + lane + (shift) < m) dst[lane] = src[k0 + lane + (shift)]
// The element (row r, value j) of a tile that lane moves in instruction i of rows r0...
#define TILE_ROW(r0, i) ((r0) + (i) * LANE_ROWS + lane / VALUES)
#define TILE_VALUE (lane % VALUES)
template <int B>
__device__ void load_tile(T (*tile)[VALUES + 1], const T* base, long long stride, int k0, int kn, int rows,
        int lane) {
    const int j = TILE_VALUE;
    for (int r0 = 0; r0 < rows; r0 += B * LANE_ROWS) {
        T v[B];
        #pragma unroll
        for (int i = 0; i < B; ++i)
            if (TILE_ROW(r0, i) < rows && j < kn) v[i] = base[TILE_ROW(r0, i) * stride + k0 + j];
        #pragma unroll
        for (int i = 0; i < B; ++i)
            if (TILE_ROW(r0, i) < rows && j < kn) tile[TILE_ROW(r0, i)][j] = v[i];
    }
    __syncwarp();
}
// The tile back into the rows, plus an addend of d's layout where added is not nullptr (a solve's last
// store: the solution added to the field it increments, u + du, as the values leave; its loads are
// batched as load_tile's, a plain store is not).
template <int B>
__device__ void store_tile(T (*tile)[VALUES + 1], T* base, const T* added, long long stride, int k0, int kn,
        int rows, int lane) {
    const int j = TILE_VALUE;
    __syncwarp();
    if (added == nullptr) {
        for (int r0 = 0; r0 < rows; r0 += LANE_ROWS)
            if (TILE_ROW(r0, 0) < rows && j < kn) base[TILE_ROW(r0, 0) * stride + k0 + j] = tile[TILE_ROW(r0, 0)][j];
        __syncwarp();
        return;
    }
    for (int r0 = 0; r0 < rows; r0 += B * LANE_ROWS) {
        T v[B];
        #pragma unroll
        for (int i = 0; i < B; ++i)
            if (TILE_ROW(r0, i) < rows && j < kn) v[i] = added[TILE_ROW(r0, i) * stride + k0 + j];
        #pragma unroll
        for (int i = 0; i < B; ++i)
            if (TILE_ROW(r0, i) < rows && j < kn)
                base[TILE_ROW(r0, i) * stride + k0 + j] = tile[TILE_ROW(r0, i)][j] + v[i];
    }
    __syncwarp();
}
"""


#: what each entry of a geometry may be: a tile's lanes cover whole rows, a block at most 1024 threads
ALLOWED = {"VALUES": (1, 2, 4, 8, 16, 32), "WARPS": tuple(range(1, 33)), "BATCH": tuple(range(1, 65))}
#: the static shared memory of a block (bytes)
SHARED_BYTES = 48 * 1024


def shared_bytes(geometry: dict, itemsize: int) -> int:
    """A block's shared memory under ``geometry`` for values of ``itemsize`` bytes: each warp's tile
    and up to three staged coefficient arrays (real, at most as wide as the values)."""
    values = geometry["VALUES"]
    return geometry["WARPS"] * (32 * (values + 1) + 3 * values) * itemsize


def definitions(geometry: dict, itemsize: int = 8) -> str:
    """The ``#define`` lines of a tile geometry (a :data:`GEOMETRY` value), to precede :data:`TILES`,
    for values of ``itemsize`` bytes; a key or value outside :data:`ALLOWED`, or tiles beyond a
    block's shared memory, is a ``ValueError`` naming the setting."""
    for name, value in geometry.items():
        if name not in ALLOWED:
            raise ValueError(f"row kernel geometry: unknown key {name!r}; the keys are {', '.join(ALLOWED)}")
        allowed = ALLOWED[name]
        if type(value) is not int or value not in allowed:
            listed = ", ".join(map(str, allowed)) if len(allowed) < 10 else f"{allowed[0]} to {allowed[-1]}"
            raise ValueError(f"row kernel geometry: {name} = {value!r}; allowed: {listed}")
    missing = [name for name in ALLOWED if name not in geometry]
    if missing:
        raise ValueError(f"row kernel geometry: {', '.join(missing)} missing; a geometry gives {', '.join(ALLOWED)}")
    if shared_bytes(geometry, itemsize) > SHARED_BYTES:
        raise ValueError(f"row kernel geometry: WARPS = {geometry['WARPS']} tiles of VALUES = {geometry['VALUES']} "
                         f"take {shared_bytes(geometry, itemsize)} bytes of shared memory a block, over "
                         f"{SHARED_BYTES}; fewer WARPS or VALUES")
    return "".join(f"#define {name} {value}\n" for name, value in geometry.items())


SOURCES = {
    # thomas_uniform on rows, its arithmetic in its order. With adding != 0 the solution leaves as
    # addend + x (addend in d's layout).
    "thomas_uniform_rows": TILES + r"""
extern "C" __global__ void thomas_uniform_rows(T* d, const R* lower, const R* inv, const R* cp, const int m,
        const long long ncols, const long long stride, const T* addend, const int adding) {
    ROW_TILES(ncols);
    COEFFICIENTS(2);
    const T* added = ADDED_ROWS(addend, adding);
    T x = T(0);
    for (int k0 = 0; k0 < m; k0 += VALUES) {
        const int kn = min(VALUES, m - k0);
        STAGE(c[0], lower, 0);
        STAGE(c[1], inv, 0);
        load_tile<BATCH>(tile, base, stride, k0, kn, rows, lane);
        if (lane < rows) {
            for (int j = 0; j < kn; ++j) {
                const int k = k0 + j;
                x = k == 0 ? tile[lane][j] * c[1][0] : (tile[lane][j] - c[0][j] * x) * c[1][j];
                tile[lane][j] = x;
            }
        }
        store_tile<BATCH>(tile, base, nullptr, stride, k0, kn, rows, lane);
    }
    for (int k0 = ((m - 1) / VALUES) * VALUES; k0 >= 0; k0 -= VALUES) {
        const int kn = min(VALUES, m - k0);
        STAGE(c[0], cp, 0);
        load_tile<BATCH>(tile, base, stride, k0, kn, rows, lane);
        if (lane < rows) {
            for (int j = kn - 1; j >= 0; --j) {
                const int k = k0 + j;
                if (k < m - 1) {
                    x = tile[lane][j] - c[0][j] * x;
                    tile[lane][j] = x;
                }
            }
        }
        store_tile<BATCH>(tile, base, added, stride, k0, kn, rows, lane);
    }
}
""",
    # P-TDMA's local reduction on rows, for one matrix shared by every row: d is (nrows, stride)
    # C-ordered, each row's first m values one chunk of a system. One forward sweep (cr_reduce's, in
    # its arithmetic) stores the forward values; the backward sweep's only result a solve needs, row
    # 0's reduced value, is a fixed weighted sum of the row's right-hand side (first_weights), which
    # the same sweep accumulates and writes into row 0. Tiles through shared memory as in
    # thomas_uniform_rows: two passes over the chunk, as many as a local Thomas sweep's forward half.
    "cr_reduce_rows": TILES + r"""
extern "C" __global__ void cr_reduce_rows(T* __restrict__ d, const R* __restrict__ lower,
        const R* __restrict__ inv_b, const R* __restrict__ first_weights, const int m,
        const long long nrows, const long long stride) {
    ROW_TILES(nrows);
    COEFFICIENTS(3);
    if (m < 3) return;
    T x = T(0), first = T(0);
    for (int k0 = 0; k0 < m; k0 += VALUES) {
        const int kn = min(VALUES, m - k0);
        STAGE(c[0], lower, 0);
        STAGE(c[1], inv_b, -1);
        STAGE(c[2], first_weights, 0);
        load_tile<BATCH>(tile, base, stride, k0, kn, rows, lane);
        if (lane < rows) {
            for (int j = 0; j < kn; ++j) {
                const int k = k0 + j;
                const T t = tile[lane][j];
                first += c[2][j] * t;
                if (k == 1) x = t;
                if (k >= 2) {
                    x = t - c[0][j] * x * c[1][j];
                    tile[lane][j] = x;
                }
            }
        }
        store_tile<BATCH>(tile, base, nullptr, stride, k0, kn, rows, lane);
    }
    if (lane < rows) base[lane * stride] = first;
}
""",
    # The reconstruction after cr_reduce_rows: the solved boundary values first and last (one per
    # row) known, the interior is the backward sweep of the forward values, each row k of which reads
    # forward_a[k] x_0 + b_k x_k + upper[k] x_{k+1} = d'_k. Tiles, and the addend, as in
    # thomas_uniform_rows.
    "cr_reconstruct_rows": TILES + r"""
extern "C" __global__ void cr_reconstruct_rows(T* __restrict__ d, const T* __restrict__ first,
        const T* __restrict__ last, const R* __restrict__ forward_a, const R* __restrict__ upper,
        const R* __restrict__ inv_b, const int m, const long long nrows, const long long stride,
        const T* __restrict__ addend, const int adding) {
    ROW_TILES(nrows);
    COEFFICIENTS(3);
    const T* added = ADDED_ROWS(addend, adding);
    const T x0 = lane < rows ? first[row0 + lane] : T(0);
    T x = lane < rows ? last[row0 + lane] : T(0);
    for (int k0 = ((m - 1) / VALUES) * VALUES; k0 >= 0; k0 -= VALUES) {
        const int kn = min(VALUES, m - k0);
        STAGE(c[0], forward_a, 0);
        STAGE(c[1], upper, 0);
        STAGE(c[2], inv_b, 0);
        load_tile<BATCH>(tile, base, stride, k0, kn, rows, lane);
        if (lane < rows) {
            for (int j = kn - 1; j >= 0; --j) {
                const int k = k0 + j;
                if (k == 0) {
                    tile[lane][j] = x0;
                } else if (k < m - 1) {
                    x = (tile[lane][j] - c[0][j] * x0 - c[1][j] * x) * c[2][j];
                    tile[lane][j] = x;
                } else {
                    tile[lane][j] = x;
                }
            }
        }
        store_tile<BATCH>(tile, base, added, stride, k0, kn, rows, lane);
    }
}
""",
}
