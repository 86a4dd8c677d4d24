// ---- decode kernels' TMA ring and cluster sum (decode.cu.j2, decode_fp8.cu.j2) -------------------------
// The including template defines ELEM_BYTES, EPC (elements in one 16-byte chunk), BOX (in one 128-byte
// swizzle row), BK, BN, STAGES, CS, B_KMAJOR, A_BOX_BYTES, A_STAGE_BYTES, B_BOX_BYTES, B_STAGE_BYTES and
// STAGE_BYTES. A stage is A's ROWS x BK slice, then B's BK x BN slice, in boxes of 128-byte swizzled rows
// (chunk index XOR row % 8) as TMA lands them; rows past M or N, and K past its end, arrive as zeros.

// the byte offset of 16-byte chunk `chunk` of row `row` in a box of 128-byte swizzled rows
__device__ __forceinline__ unsigned swizzled(int row, int chunk) {
    return row * 128 + ((chunk ^ (row & 7)) << 4);
}

// the byte offset of element (row, col) of a stage operand stored as boxes of `box_bytes`
__device__ __forceinline__ unsigned element(int box_bytes, int row, int col) {
    return (col / BOX) * box_bytes + swizzled(row, col % BOX / EPC) + (col % EPC) * ELEM_BYTES;
}

// the byte offset of B's element (k, n) in a stage
__device__ __forceinline__ unsigned b_element(int k, int n) {
    return B_KMAJOR ? element(B_BOX_BYTES, n, k) : element(B_BOX_BYTES, k, n);
}

// the ring's barriers at `bars`: full[s] (the stage has landed), then empty[s] (every consumer is done)
__device__ __forceinline__ unsigned full_bar(unsigned bars, int s) { return bars + 8u * s; }
__device__ __forceinline__ unsigned empty_bar(unsigned bars, int s) { return bars + 8u * (STAGES + s); }

// Thread 0 sets up the ring (full[s]: full_arrivals arrivals, the producer's with the stage's bytes and one
// per lane that copies more into the stage; empty[s]: one arrival per consumer warp) and prefetches the
// maps; then every thread waits for that and for the kernel before this one on the stream. No
// pdl_allow_next(): measured no faster here, slower at the smallest shapes (NOTES-hopper.md).
__device__ __forceinline__ void ring_init(unsigned bars, int consumer_warps, const TensorMap* map_a,
                                          const TensorMap* map_b, int full_arrivals = 1) {
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full_bar(bars, s), full_arrivals);
            mbar_init(empty_bar(bars, s), consumer_warps);
        }
        mbar_fence_init();
        tma_prefetch_map(map_a);
        tma_prefetch_map(map_b);
    }
    __syncthreads();
    pdl_wait();
}

// The producer's walk: stage i of the ring takes K-block kb_begin + i of A's rows and of B's BN columns
// from col0, once every consumer has released the stage's previous contents. Lane 0 of the calling lanes
// issues the copies; then every calling lane runs extra(K-block, stage), which may add copies of its own
// that arrive on the stage's full barrier (ring_init's full_arrivals counts them).
template <typename Extra>
__device__ __forceinline__ void produce(int kb_count, int kb_begin, int col0, unsigned stages, unsigned bars,
                                        const TensorMap* map_a, const TensorMap* map_b, Extra&& extra) {
    for (int i = 0; i < kb_count; ++i) {
        const int s = i % STAGES, k = (kb_begin + i) * BK;
        mbar_wait(empty_bar(bars, s), ((i / STAGES) & 1) ^ 1);
        if (threadIdx.x % 32 == 0) {
            mbar_arrive_expect_tx(full_bar(bars, s), STAGE_BYTES);
            const unsigned dst = stages + s * STAGE_BYTES;
#pragma unroll
            for (int b = 0; b < BK / BOX; ++b)
                tma_load_2d(dst + b * A_BOX_BYTES, map_a, full_bar(bars, s), k + b * BOX, 0);
#pragma unroll
            for (int b = 0; b < B_STAGE_BYTES / B_BOX_BYTES; ++b) {
                if constexpr (B_KMAJOR)  // the map is over Bᵀ: N rows of K contiguous elements
                    tma_load_2d(dst + A_STAGE_BYTES + b * B_BOX_BYTES, map_b, full_bar(bars, s), k + b * BOX, col0);
                else
                    tma_load_2d(dst + A_STAGE_BYTES + b * B_BOX_BYTES, map_b, full_bar(bars, s), col0 + b * BOX, k);
            }
        }
        extra(kb_begin + i, s);
    }
}

__device__ __forceinline__ void produce(int kb_count, int kb_begin, int col0, unsigned stages, unsigned bars,
                                        const TensorMap* map_a, const TensorMap* map_b) {
    produce(kb_count, kb_begin, col0, stages, bars, map_a, map_b, [](int, int) {});
}

// A consumer warp's walk through the ring: multiply(stage address) on each of its kb_count stages once
// landed, then the stage goes back to the producer.
template <typename Multiply>
__device__ __forceinline__ void consume(int kb_count, unsigned stages, unsigned bars, int lane, Multiply&& multiply) {
    for (int i = 0; i < kb_count; ++i) {
        const int s = i % STAGES;
        mbar_wait(full_bar(bars, s), (i / STAGES) & 1);
        multiply(stages + s * STAGE_BYTES);
        release_read_stage(empty_bar(bars, s), lane);
    }
}

// The swapped product on wgmma (MMA = 1: 64 of the block's columns as the instruction's m64, A's rows as
// its n): register i of a warp's lane, in the accumulators of 64-column slice `slice`, holds C's row
// swapped_row(i, lane) and the block's column swapped_column(slice, warp, lane, i).
__device__ __forceinline__ int swapped_row(int i, int lane) { return 8 * (i / 4) + 2 * (lane % 4) + i % 2; }
__device__ __forceinline__ int swapped_column(int slice, int warp, int lane, int i) {
    return 64 * slice + 16 * (warp % 4) + lane / 4 + 8 * ((i / 2) % 2);
}

// the value of element (row, col) of the cluster's fp32 tiles (ROWS x BN at `tile` in every block) summed
// over its blocks in rank order: the same bits on every run
__device__ __forceinline__ float cluster_sum(unsigned tile, int row, int col) {
    const unsigned at = tile + 4u * (row * BN + col);
    float sum = 0.f;
#pragma unroll
    for (int s = 0; s < CS; ++s) {
        float part;
        asm volatile("{\n .reg .b32 remote;\n"
                     " mapa.shared::cluster.u32 remote, %1, %2;\n"
                     " ld.shared::cluster.f32 %0, [remote];\n}\n"
                     : "=f"(part) : "r"(at), "r"(s) : "memory");
        sum += part;
    }
    return sum;
}
