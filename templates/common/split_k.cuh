// ---- split-K: several blocks share one C tile, each summing a slice of K -------------------------
// A family with split_k = True gets `splits` from the launcher (gridDim.y for one-block-per-tile
// kernels, an argument for persistent ones) and a workspace as its last argument, laid out as
//   [tiles] unsigned counters, then [tiles][SPLIT_K_MAX_GROUPS] the groups' counters (zero between
//       launches: the last block to arrive on a counter resets it), padded to 256 bytes
//   [splits][tiles][ELEMS] fp32 partial tiles, element e of thread t at e * NTHREADS + t (coalesced)
// Every split stores its partial and arrives. With few splits the last to arrive on the tile's counter adds
// the partials in split order 0, 1, ... and runs the epilogue once. With many (split_k_group_size) they sum
// in two levels (split_k_combine): the last of each group of consecutive splits adds its group's partials
// in order and stores the sum in the group's first slot, and the last group to arrive adds the groups'
// sums in order. Either way the order is fixed, so the result is bitwise the same whichever block finishes
// last; the two levels shorten the chain of L2 round trips the last block waits on (32 splits: 12, not 32).
// Partial sums stay fp32 whatever T_IN is.
// SPLIT_ATOMIC (a variant rendered with_extras(split_atomic=True); the API's deterministic=False): every split
// adds its partial into the tile's one slot with fp32 atomics and arrives, and the last to arrive reads the
// sum and leaves the slot zero for the next launch (the launcher zeroes the slots once, with the counters).
// One L2 round trip where the ordered sum waits on a chain of them, and one slot a tile; the order of the
// adds, and so the last bits of the sum, may differ from run to run.
constexpr int SPLIT_K_MAX_GROUPS = 8;  // cupy_gemm/workspace.py sizes the counters by it
constexpr bool SPLIT_K_ATOMIC = {{ SPLIT_ATOMIC }};

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
    // the counters padded to 256 bytes so partial tiles start aligned
    float* partials = reinterpret_cast<float*>(static_cast<unsigned char*>(workspace) +
                                               ((tiles * 4 * (1 + SPLIT_K_MAX_GROUPS) + 255) / 256) * 256);
    return partials + ((long long)split * tiles + tile) * elems;
}

// The distance between two splits' partials of one tile (split_k_partial's layout)
__device__ __forceinline__ long long split_k_stride(int tiles, int elems) { return (long long)tiles * elems; }

// Called by every thread of the NTHREADS that hold the tile (after storing their partial), between two
// barriers of those threads that the caller supplies: returns true in every thread of the block that
// arrives last of `arrivals` on `counter`, which it resets, so the next launch starts at zero. `flag` is a
// shared int the caller owns.
template <typename Sync>
__device__ __forceinline__ bool split_k_arrive_on(unsigned* counter, int arrivals, int tid, int* flag, Sync sync) {
    __threadfence();  // this thread's partial is visible device-wide before the block arrives
    sync();
    if (tid == 0) {
        const unsigned before = atomicAdd(counter, 1u);
        const bool last = before == (unsigned)arrivals - 1;
        if (last) atomicExch(counter, 0u);
        *flag = last;
    }
    sync();
    const bool last = *flag != 0;
    if (last) __threadfence();  // acquire: the others' partials are read after their arrivals
    sync();  // flag may be reused by the caller's next tile
    return last;
}

// The one-level protocol on the tile's counter (the skinny kernels sum their partials themselves)
template <typename Sync>
__device__ __forceinline__ bool split_k_arrive(void* workspace, int tile, int splits, int tid, int* flag,
                                               Sync sync) {
    return split_k_arrive_on(split_k_counters(workspace) + tile, splits, tid, flag, sync);
}

// Splits a group of the two-level sum, for a gather with `in_flight` slots' loads at once: about √splits (at
// most SPLIT_K_MAX_GROUPS groups) where two levels wait on fewer L2 round trips than one, counting a level
// as SPLIT_K_LEVEL_COST more (the group sum's stores, the fence, the arrival); else splits, one level. On
// an H200 two levels ran 1.01-1.16x faster at 16 to 32 splits and 5-13% slower at 5 to 10, which the cost
// of 4 sorts apart.
constexpr int SPLIT_K_LEVEL_COST = 4;

__host__ __device__ constexpr int split_k_group_size(int splits, int in_flight) {
    int size = 1;
    while (size * size < splits) ++size;
    const int fewest = (splits + SPLIT_K_MAX_GROUPS - 1) / SPLIT_K_MAX_GROUPS;
    size = size > fewest ? size : fewest;
    const int groups = (splits + size - 1) / size;
    const int one = (splits + in_flight - 1) / in_flight;
    const int two = (size + in_flight - 1) / in_flight + (groups + in_flight - 1) / in_flight + SPLIT_K_LEVEL_COST;
    return two < one ? size : splits;
}

// This thread's share of a partial tile: E groups of V floats (V = 1, or 4 for a float4), group e at
// (e * THREADS_ + t) * V floats into the slot; at(i) is float i (group i / V, float i % V). ADD (SPLIT_ATOMIC):
// added into the slot by atomics, a float4 in one vector add (sm_90 and later: cupy_gemm.workspace.atomic_sum).
template <int THREADS_, int E, int V, bool ADD = false, typename At>
__device__ __forceinline__ void split_k_put(At at, float* slot, int t) {
    static_assert(V == 1 || V == 4, "floats or float4s");
#pragma unroll
    for (int e = 0; e < E; ++e) {
        if constexpr (V == 4) {
            float4* const to = reinterpret_cast<float4*>(slot) + e * THREADS_ + t;
            // auto: q's type depends on At, so the float4 atomicAdd is looked up only where ADD instantiates it
            // (sm_90: an sm_80 build has no such overload)
            const auto q = make_float4(at(4 * e), at(4 * e + 1), at(4 * e + 2), at(4 * e + 3));
            if constexpr (ADD) atomicAdd(to, q);
            else __stcg(to, q);
        } else if constexpr (ADD) {
            atomicAdd(slot + e * THREADS_ + t, at(e));
        } else {
            __stcg(slot + e * THREADS_ + t, at(e));
        }
    }
}

// at := the sum of `count` slots first, first + step, ... in that order, from zero. The loads of IN_FLIGHT
// slots are issued before their adds (a slot past the last is loaded again and not added: no branches
// around the loads). Two in flight made the warpgroup and mma.sync kernels up to 5% faster at split shapes
// (H200); sgemm_simt's 8×4 tile lost 8% with two, so it keeps one (split_k_in_flight).
__host__ __device__ constexpr int split_k_in_flight(int floats) { return floats >= 64 ? 1 : 2; }

template <int THREADS_, int E, int V, int IN_FLIGHT, typename At>
__device__ __forceinline__ void split_k_gather(At at, const float* slot0, long long slot_stride, int first, int count,
                                               int step, int t) {
    static_assert(V == 1 || V == 4, "floats or float4s");
    static_assert(IN_FLIGHT >= 1, "at least one slot in flight");
    constexpr int FLOATS = E * V;
#pragma unroll
    for (int i = 0; i < FLOATS; ++i) at(i) = 0.f;
    for (int j0 = 0; j0 < count; j0 += IN_FLIGHT) {
        float v[IN_FLIGHT][FLOATS];
#pragma unroll
        for (int g = 0; g < IN_FLIGHT; ++g) {
            const float* const part = slot0 + (first + min(j0 + g, count - 1) * step) * slot_stride;
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
        for (int g = 0; g < IN_FLIGHT; ++g)
#pragma unroll
            for (int i = 0; i < FLOATS; ++i)
                if (j0 + g < count) at(i) += v[g][i];
    }
}

// SPLIT_ATOMIC, in the last split: at := the tile's sum, and the slot zero again
template <int THREADS_, int E, int V, typename At>
__device__ __forceinline__ void split_k_take(At at, float* slot, int t) {
#pragma unroll
    for (int e = 0; e < E; ++e) {
        if constexpr (V == 4) {
            float4* const q = reinterpret_cast<float4*>(slot) + e * THREADS_ + t;
            const float4 s = __ldcg(q);
            at(4 * e) = s.x, at(4 * e + 1) = s.y, at(4 * e + 2) = s.z, at(4 * e + 3) = s.w;
            __stcg(q, make_float4(0.f, 0.f, 0.f, 0.f));
        } else {
            at(e) = __ldcg(slot + e * THREADS_ + t);
            __stcg(slot + e * THREADS_ + t, 0.f);
        }
    }
}

// Split `split` of `splits` of the tile: stores its partial (at, split_k_put's layout), arrives, and in the
// block that arrives last overall leaves the tile's sum in `sum` and returns true (that block then stores C);
// false in every other block. Called by the THREADS_ threads that hold the tile, between barriers of those
// threads that `sync` supplies (thread t of them); `flag` is a shared int the caller owns. TWO_LEVELS = false:
// one level whatever the splits, for a kernel whose registers have no room for the second. `sum` may be other
// registers than `at` (whose values are dead once stored): the caller then stores C from them on a path of its
// own, and the allocator need not bring the sum back into the accumulators' registers (sgemm_simt).
template <int THREADS_, int E, int V, int IN_FLIGHT, bool TWO_LEVELS = true, typename At, typename Sum, typename Sync>
__device__ __forceinline__ bool split_k_combine_into(At at, Sum sum, void* workspace, int tiles, int tile, int split,
                                                     int splits, int t, int* flag, Sync sync) {
    constexpr int ELEMS = THREADS_ * E * V;
    unsigned* const counters = split_k_counters(workspace);
    if constexpr (SPLIT_K_ATOMIC) {
        split_k_put<THREADS_, E, V, true>(at, split_k_partial(workspace, tiles, tile, 0, ELEMS), t);
        if (!split_k_arrive_on(counters + tile, splits, t, flag, sync)) return false;
        split_k_take<THREADS_, E, V>(sum, split_k_partial(workspace, tiles, tile, 0, ELEMS), t);
        return true;
    }
    // (the partials' addresses are worked out again after each arrival rather than kept live across it:
    // registers are tight in some mma.sync tiles)
    split_k_put<THREADS_, E, V>(at, split_k_partial(workspace, tiles, tile, split, ELEMS), t);
    const int size = TWO_LEVELS ? split_k_group_size(splits, IN_FLIGHT) : splits;
    const int group = split / size, first = group * size;
    if (size == splits) {  // one group: the tile's counter, and the tile's sum
        if (!split_k_arrive_on(counters + tile, splits, t, flag, sync)) return false;
        split_k_gather<THREADS_, E, V, IN_FLIGHT>(sum, split_k_partial(workspace, tiles, tile, 0, ELEMS),
                                              split_k_stride(tiles, ELEMS), 0, splits, 1, t);
        return true;
    }
    const int in_group = min(size, splits - first);  // the last group may be short
    if (!split_k_arrive_on(counters + tiles + tile * SPLIT_K_MAX_GROUPS + group, in_group, t, flag, sync)) return false;
    split_k_gather<THREADS_, E, V, IN_FLIGHT>(sum, split_k_partial(workspace, tiles, tile, 0, ELEMS),
                                          split_k_stride(tiles, ELEMS), first, in_group, 1, t);
    split_k_put<THREADS_, E, V>(sum, split_k_partial(workspace, tiles, tile, first, ELEMS), t);  // in its first slot
    const int groups = (splits + size - 1) / size;
    if (!split_k_arrive_on(counters + tile, groups, t, flag, sync)) return false;
    split_k_gather<THREADS_, E, V, IN_FLIGHT>(sum, split_k_partial(workspace, tiles, tile, 0, ELEMS),
                                          split_k_stride(tiles, ELEMS), 0, groups, size, t);
    return true;
}

// The same with the sum left in at (the accumulators), where the caller stores C from them on one path
template <int THREADS_, int E, int V, int IN_FLIGHT, bool TWO_LEVELS = true, typename At, typename Sync>
__device__ __forceinline__ bool split_k_combine(At at, void* workspace, int tiles, int tile, int split, int splits,
                                                int t, int* flag, Sync sync) {
    return split_k_combine_into<THREADS_, E, V, IN_FLIGHT, TWO_LEVELS>(at, at, workspace, tiles, tile, split, splits, t,
                                                                        flag, sync);
}

// The warpgroup kernels' side (templates/wgmma.cu.j2, wgmma_fp8.cu.j2, wgmma_tf32_swap.cu.j2): the THREADS_
// consumer threads hold the tile as fragments acc[MI][N], element e = mi * N + i of thread c at e * THREADS_ + c
// (each warp store 128 contiguous bytes); `sync` is a barrier of those threads only (the producer is already
// loading the next unit). In the last split acc becomes the tile's sum; returns whether this was it.
template <int THREADS_, int MI, int N, typename Sync>
__device__ __forceinline__ bool split_k_fragments(float (&acc)[MI][N], void* workspace, int tiles, int tile, int split,
                                                  int splits, int c, int* flag, Sync sync) {
    return split_k_combine<THREADS_, MI * N, 1, split_k_in_flight(MI * N)>(
        [&](int i) -> float& { return acc[i / N][i % N]; }, workspace, tiles, tile, split, splits, c, flag, sync);
}
