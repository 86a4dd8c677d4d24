// ---- stream-K: the last tiles' K iterations spread evenly over every block of a persistent grid -----
// With T tiles on P blocks a last wave of T % P tiles leaves most SMs idle (160 tiles of 128×256 on 132
// SMs run two waves for 1.2 waves of work). Stream-K keeps the data-parallel waves but the last one:
// block b first takes the whole tiles b, b + P, ... below DP_TILES = P * (T / P - 1), then the K
// iterations of the remaining tiles, SK_TILES * k_blocks of them numbered tile-major, are cut into P
// equal ranges, block b taking [b * total / P, (b + 1) * total / P): the end of one tile, whole tiles,
// the start of another. The blocks that share a tile are its splits, numbered in order along K, and
// sum their fp32 partials as split-K's splits do (common/split_k.cuh): the last to arrive adds them in
// split order, so the result is bitwise repeatable. cupy_gemm/stream_k.py mirrors this partition for the
// launcher, which sizes the workspace for the most splits any tile has.
struct StreamK {
    int block, blocks, k_blocks;
    int dp_units;         // whole tiles this block takes first: block, block + blocks, ...
    int dp_tiles;         // the tiles taken whole, by every block
    int sk_blocks;        // blocks sharing the stream-K iterations (every block, unless they are fewer)
    long long sk_total;   // stream-K iterations: the other tiles' K blocks
    long long lo, hi;     // this block's share of them
    int units;            // work units of this block: its whole tiles, then the stream-K tiles its share touches
};

__device__ __forceinline__ StreamK stream_k_plan(int tiles, int k_blocks, int block, int blocks) {
    StreamK s;
    s.block = block;
    s.blocks = blocks;
    s.k_blocks = k_blocks;
    const int waves = tiles / blocks;
    s.dp_tiles = waves > 1 ? (waves - 1) * blocks : 0;
    s.dp_units = s.dp_tiles / blocks;
    s.sk_total = (long long)(tiles - s.dp_tiles) * k_blocks;
    // the launcher gives no more blocks than iterations; fewer iterations would leave a split of a tile
    // with an empty range, whose arrival never comes
    s.sk_blocks = (int)min((long long)blocks, s.sk_total);
    const bool shares = block < s.sk_blocks;
    s.lo = shares ? s.sk_total * block / s.sk_blocks : s.sk_total;
    s.hi = shares ? s.sk_total * (block + 1) / s.sk_blocks : s.sk_total;
    s.units = s.dp_units + (s.hi > s.lo ? (int)((s.hi - 1) / k_blocks - s.lo / k_blocks) + 1 : 0);
    return s;
}

// The block whose share holds stream-K iteration x: the last b with b * total / P <= x.
__device__ __forceinline__ int stream_k_owner(const StreamK& s, long long x) {
    return (int)(((x + 1) * s.sk_blocks - 1) / s.sk_total);
}

__device__ __forceinline__ WorkUnit stream_k_unit(const StreamK& s, int unit) {
    if (unit < s.dp_units) return {s.block + unit * s.blocks, 0, s.k_blocks, 0, 1};
    const int t = (int)(s.lo / s.k_blocks) + unit - s.dp_units;  // among the stream-K tiles
    const long long begin = (long long)t * s.k_blocks, end = begin + s.k_blocks;
    const long long lo = max(begin, s.lo), hi = min(end, s.hi);
    const int first = stream_k_owner(s, begin);
    return {s.dp_tiles + t, (int)(lo - begin), (int)(hi - lo), s.block - first, stream_k_owner(s, end - 1) - first + 1};
}
