// ---- stream-K: the last tiles' K iterations spread over the blocks of a persistent grid --------------
// With T tiles on P blocks a last wave of T % P tiles leaves most SMs idle (160 tiles of 128×256 on 132
// SMs run two waves for 1.2 waves of work). Stream-K keeps whole tiles for the waves before and shares
// out the K iterations of the rest, SK_TILES * k_blocks of them numbered tile-major: block b takes
// [b * total / S, (b + 1) * total / S) for b below S, the sharing blocks. Two partitions (the MODE):
//  1, classic: the whole tiles are those below DP_TILES = P * (T / P - 1), block b taking b, b + P, ...;
//     the last one to two waves' iterations go to all S = P blocks in equal shares, so a share may hold
//     the end of one tile, whole tiles and the start of another;
//  2, the last wave split: every whole wave (DP_TILES = P * (T / P)), then each of the R = T % P tiles
//     left is cut into s = min(P / R, k_blocks, STREAM_K_TAIL_SPLITS) equal shares (S = R * s). No share
//     crosses a tile, so the blocks of every tile start at the same K offsets (a column of tiles reads
//     B's slices together), and a tile waits for s partials at most. With fewer tiles than blocks the
//     launcher starts only the T * s blocks that take a share (the same partition on that grid).
// The blocks that share a tile are its splits, numbered in order along K, and sum their fp32 partials
// as split-K's splits do (common/split_k.cuh): in a fixed order whoever arrives last, so the result
// is bitwise repeatable. cupy_gemm/stream_k.py mirrors both partitions for the launcher, which sizes the
// workspace for the most splits any tile has.
constexpr int STREAM_K_TAIL_SPLITS = 8;  // past this a tile's s partials cost more than its share saves

struct StreamK {
    int block, blocks, k_blocks;
    int dp_units;         // whole tiles this block takes first: block, block + blocks, ...
    int dp_tiles;         // the tiles taken whole, by every block
    int sk_blocks;        // blocks sharing the stream-K iterations (S above)
    long long sk_total;   // stream-K iterations: the other tiles' K blocks
    long long lo, hi;     // this block's share of them
    int units;            // work units of this block: its whole tiles, then the stream-K tiles its share touches
};

template <int MODE>
__device__ __forceinline__ StreamK stream_k_plan(int tiles, int k_blocks, int block, int blocks) {
    StreamK s;
    s.block = block;
    s.blocks = blocks;
    s.k_blocks = k_blocks;
    const int waves = tiles / blocks;
    s.dp_tiles = MODE == 2 ? waves * blocks : waves > 1 ? (waves - 1) * blocks : 0;
    s.dp_units = s.dp_tiles / blocks;
    const int rest = tiles - s.dp_tiles;
    s.sk_total = (long long)rest * k_blocks;
    // the launcher gives no more blocks than iterations; fewer iterations would leave a split of a tile
    // with an empty range, whose arrival never comes
    s.sk_blocks = MODE == 2 ? rest * (rest ? max(1, min(min(blocks / rest, k_blocks), STREAM_K_TAIL_SPLITS)) : 0)
                            : (int)min((long long)blocks, s.sk_total);
    const bool shares = block < s.sk_blocks;
    s.lo = shares ? s.sk_total * block / s.sk_blocks : s.sk_total;
    s.hi = shares ? s.sk_total * (block + 1) / s.sk_blocks : s.sk_total;
    s.units = s.dp_units + (s.hi > s.lo ? (int)((s.hi - 1) / k_blocks - s.lo / k_blocks) + 1 : 0);
    return s;
}

// The block whose share holds stream-K iteration x: the last b with b * total / S <= x.
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
