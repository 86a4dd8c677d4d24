// ---- split-K: several blocks share one C tile, each summing a slice of K -------------------------
// A family with split_k = True gets `splits` from the launcher (gridDim.y for one-block-per-tile
// kernels, an argument for persistent ones) and a workspace as its last argument, laid out as
//   [tiles] unsigned counters   (zero between launches: the last block of a tile resets its own)
//   [splits][tiles][ELEMS] fp32 partial tiles, element e of thread t at e * NTHREADS + t (coalesced)
// Every split stores its partial, then arrives on the tile's counter; the split that arrives last adds
// the partials in split order 0, 1, ... (its own from registers) — so the result is bitwise the same
// whichever block finishes last — and runs the epilogue once. Partial sums stay fp32 whatever T_IN is.

// One work unit of a persistent kernel: K blocks of one C tile, as one of the splits that share the tile
struct WorkUnit {
    int tile, kb_begin, kb_count;  // the C tile, and the K blocks [kb_begin, kb_begin + kb_count) of it
    int split, splits;             // this block's place among the blocks sharing the tile, and their number
};

__device__ __forceinline__ int split_k_blocks(int k_blocks, int splits, int split, int& kb_begin) {
    // K blocks split as evenly as possible: the first (k_blocks % splits) splits take one more
    const int base = k_blocks / splits, extra = k_blocks % splits;
    kb_begin = split * base + min(split, extra);
    return base + (split < extra ? 1 : 0);
}

// Unit `unit` of a persistent kernel whose tiles are each shared by `splits` units side by side
// (unit = tile * splits + split)
__device__ __forceinline__ WorkUnit split_k_unit(int unit, int k_blocks, int splits) {
    WorkUnit u{unit / splits, 0, 0, unit % splits, splits};
    u.kb_count = split_k_blocks(k_blocks, splits, u.split, u.kb_begin);
    return u;
}

__device__ __forceinline__ unsigned* split_k_counters(void* workspace) {
    return static_cast<unsigned*>(workspace);
}

__device__ __forceinline__ float* split_k_partial(void* workspace, int tiles, int tile, int split, int elems) {
    // counters padded to 256 bytes so partial tiles start aligned
    float* partials = reinterpret_cast<float*>(static_cast<unsigned char*>(workspace) +
                                               ((tiles * 4 + 255) / 256) * 256);
    return partials + ((long long)split * tiles + tile) * elems;
}

// Called by every thread of the NTHREADS that hold the tile (after storing their partial), between two
// barriers of those threads that the caller supplies: returns true in every thread of the last split.
// `flag` is a shared int the caller owns. The counter is reset here, so the next launch starts at zero.
template <typename Sync>
__device__ __forceinline__ bool split_k_arrive(void* workspace, int tile, int splits, int tid, int* flag,
                                               Sync sync) {
    __threadfence();  // this thread's partial is visible device-wide before the block arrives
    sync();
    if (tid == 0) {
        unsigned* counter = split_k_counters(workspace) + tile;
        const unsigned before = atomicAdd(counter, 1u);
        const bool last = before == (unsigned)splits - 1;
        if (last) atomicExch(counter, 0u);
        *flag = last;
    }
    sync();
    const bool last = *flag != 0;
    if (last) __threadfence();  // acquire: the other splits' partials are read after their arrivals
    sync();  // flag may be reused by the caller's next tile
    return last;
}

// The last split's sum, in split order 0, 1, ..., splits - 1 (its own partial read back like the others'),
// so the result is bitwise the same whichever block arrives last. This thread's share of a partial is E
// groups of V floats (V = 1, or 4 for a float4), group e at (e * THREADS_ + t) * V floats into the split's
// partial tile, and at(i) is float i of the sum (group i / V, float i % V), which starts from zero. The
// loads of GROUP splits are issued before their adds, which keep split order, so the bits do not change.
// Two splits in flight (split_k_group) made the warpgroup kernels up to 5% faster at split shapes, and an
// mma.sync tile 12% (H200, 33×1001×4095); sgemm_simt's 8×4 tile lost 8% with two, so it keeps one.
__host__ __device__ constexpr int split_k_group(int floats) { return floats >= 64 ? 1 : 2; }

template <int THREADS_, int E, int V, int GROUP, typename At>
__device__ __forceinline__ void split_k_gather(At at, const float* split0, long long split_stride, int splits, int t) {
    static_assert(V == 1 || V == 4, "floats or float4s");
    static_assert(GROUP >= 1, "at least one split in flight");
    constexpr int FLOATS = E * V;
#pragma unroll
    for (int i = 0; i < FLOATS; ++i) at(i) = 0.f;
    for (int s0 = 0; s0 < splits; s0 += GROUP) {
        float v[GROUP][FLOATS];
#pragma unroll
        for (int g = 0; g < GROUP; ++g) {
            if (s0 + g >= splits) continue;
            const float* const part = split0 + (s0 + g) * split_stride;
#pragma unroll
            for (int e = 0; e < E; ++e) {
                if constexpr (V == 4) {
                    const float4 q = __ldcg(reinterpret_cast<const float4*>(part) + e * THREADS_ + t);
                    v[g][4 * e] = q.x, v[g][4 * e + 1] = q.y, v[g][4 * e + 2] = q.z, v[g][4 * e + 3] = q.w;
                } else {
                    v[g][e] = __ldcg(part + e * THREADS_ + t);
                }
            }
        }
#pragma unroll
        for (int g = 0; g < GROUP; ++g)
#pragma unroll
            for (int i = 0; i < FLOATS; ++i)
                if (s0 + g < splits) at(i) += v[g][i];
    }
}

// The distance between two splits' partials of one tile (split_k_partial's layout)
__device__ __forceinline__ long long split_k_stride(int tiles, int elems) { return (long long)tiles * elems; }

// The warpgroup kernels' side (templates/wgmma.cu.j2, wgmma_tf32_swap.cu.j2): the THREADS_ consumer threads
// hold the tile as fragments acc[MI][N], element e = mi * N + i of thread c at e * THREADS_ + c (each warp
// store 128 contiguous bytes). They store this split's partial and arrive (`sync`: a barrier of those
// threads only, the producer is already loading the next unit); in the last split acc becomes split_k_gather's
// sum. Returns whether this was the last split, which then stores C.
template <int THREADS_, int MI, int N, typename Sync>
__device__ __forceinline__ bool split_k_fragments(float (&acc)[MI][N], void* workspace, int tiles, int tile, int split,
                                                  int splits, int c, int* flag, Sync sync) {
    constexpr int ELEMS = MI * N * THREADS_;
    float* const mine = split_k_partial(workspace, tiles, tile, split, ELEMS) + c;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int i = 0; i < N; ++i) __stcg(mine + (mi * N + i) * THREADS_, acc[mi][i]);
    if (!split_k_arrive(workspace, tile, splits, c, flag, sync)) return false;
    split_k_gather<THREADS_, MI * N, 1, split_k_group(MI * N)>(
        [&](int i) -> float& { return acc[i / N][i % N]; }, split_k_partial(workspace, tiles, tile, 0, ELEMS),
        split_k_stride(tiles, ELEMS), splits, c);
    return true;
}
