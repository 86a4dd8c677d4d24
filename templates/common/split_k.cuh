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

// The last split's sum for element e: partials of splits 0..splits-1 in order, its own from `mine`.
__device__ __forceinline__ float split_k_sum(void* workspace, int tiles, int tile, int splits, int my_split,
                                             int elems, int index, float mine) {
    float sum = 0.f;
    for (int s = 0; s < splits; ++s)
        sum += s == my_split ? mine : __ldcg(split_k_partial(workspace, tiles, tile, s, elems) + index);
    return sum;
}

// The warpgroup kernels' side (templates/wgmma.cu.j2, wgmma_tf32_swap.cu.j2): the THREADS_ consumer threads
// hold the tile as fragments acc[MI][N], element e = mi * N + i of thread c at e * THREADS_ + c (each warp
// store 128 contiguous bytes). They store this split's partial and arrive (`sync`: a barrier of those
// threads only, the producer is already loading the next unit); in the last split acc becomes split_k_sum's
// sum, in its order, split by split over the whole fragment (its own partial read back: one register
// array). Returns whether this was the last split, which then stores C.
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
    for (int s = 0; s < splits; ++s) {
        const float* const part = split_k_partial(workspace, tiles, tile, s, ELEMS) + c;
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int i = 0; i < N; ++i) acc[mi][i] = (s == 0 ? 0.f : acc[mi][i]) + __ldcg(part + (mi * N + i) * THREADS_);
    }
    return true;
}
