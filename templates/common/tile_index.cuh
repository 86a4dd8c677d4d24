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
