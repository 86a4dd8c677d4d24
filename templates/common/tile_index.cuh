// ---- block swizzle: which C tile a block computes ------------------------------------------------
// Blocks run in launch order; walking C tile by tile along whole rows streams all of B through L2 for
// every row of tiles. With a swizzle stride of SWIZZLE_COLS columns, C is cut into vertical stripes
// that wide: blocks walk a stripe's row of tiles, then the next row of the same stripe, so the
// stripe's slice of B stays in L2 while A is swept down. SWIZZLE_COLS = 0 disables the swizzle.
struct Tile { int row0, col0; };

__device__ __forceinline__ Tile tile_of(int t, int M, int N, int bm, int bn, int swizzle_cols) {
    const int tiles_m = (M + bm - 1) / bm, tiles_n = (N + bn - 1) / bn;
    int stripe_w = swizzle_cols > 0 ? max(1, swizzle_cols / bn) : tiles_n;
    stripe_w = min(stripe_w, tiles_n);
    const int per_stripe = stripe_w * tiles_m;  // the host refuses grids of 2^31 tiles or more
    const int stripe = t / per_stripe, r = t - stripe * per_stripe;
    const int w = min(stripe_w, tiles_n - stripe * stripe_w);  // the last stripe may be narrower
    return Tile{(r / w) * bm, (stripe * stripe_w + r % w) * bn};
}

__device__ __forceinline__ Tile block_tile(int M, int N, int bm, int bn, int swizzle_cols) {
    return tile_of((int)blockIdx.x, M, N, bm, bn, swizzle_cols);
}

// Rows of a bm-row tile at row0 that its A copies of copy_rows rows cover: whole copies up to the first at
// or past M, none where the tile lies wholly below M. TMA zero-fills what a copy reads past M, which is not
// free, and each row of C reads only its own row of A, so the rows of the copies left out are never needed.
__device__ __forceinline__ int a_rows_to_load(int M, int row0, int bm, int copy_rows) {
    return min(bm, max(0, (M - row0 + copy_rows - 1) / copy_rows * copy_rows));
}
