// ---- wgmma epilogues: one consumer warpgroup's 64×N fp32 accumulator tile to C -------------------
// Needs common/tma.cuh and common/wgmma.cuh (st_shared_pair, store_pair). Accumulator register i of
// thread t holds row 16*(t/32) + (t%32)/4 + 8*((i/2)%2), column 8*(i/4) + 2*(t%4) + i%2 of the tile.
// C (T_OUT) is staged in boxes of 64 rows by one 128-byte swizzle row (EPI_BOX_COLS columns).
constexpr int EPI_BOX_COLS = 128 / (int)sizeof(T_OUT), EPI_BOX_BYTES = 64 * 128;

// beta = 0: alpha·acc through a swizzled staging buffer in shared memory (two boxes at `bufs`, used in
// turn as `box_count` advances), stored by TMA at (row0, col0) and clipped at C's edge. The stores run on
// while the caller goes back to its MMAs. `barrier` is a named barrier for this warpgroup's 128 threads.
template <int NACC>
__device__ __forceinline__ void epilogue_tma(const float (&acc)[NACC], const TensorMap* map_c, unsigned bufs,
                                             int& box_count, int row0, int col0, float alpha, unsigned barrier) {
    const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
#pragma unroll
    for (int box = 0; box < 2 * NACC / EPI_BOX_COLS; ++box, ++box_count) {
        const unsigned buf = bufs + (box_count & 1) * EPI_BOX_BYTES;
        // the store that last read this buffer (two boxes ago) must be done reading
        if (t == 0) tma_store_wait_read<1>();
        named_barrier_sync(barrier, 128);
#pragma unroll
        for (int jj = 0; jj < EPI_BOX_COLS / 8; ++jj) {  // the box's 8-column fragments
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                // the layout TMA's 128-byte swizzle expects: 16-byte chunk index XOR row % 8; the 8 rows
                // a warp writes at once then fall in distinct banks
                const int r = warp * 16 + lane / 4 + 8 * h;
                const int byte = (jj * 8 + (lane % 4) * 2) * (int)sizeof(T_OUT);
                const unsigned addr = buf + r * 128 + (((byte >> 4) ^ (r & 7)) << 4) + (byte & 15);
                const int i = 4 * (box * EPI_BOX_COLS / 8 + jj) + 2 * h;
                st_shared_pair(addr, alpha * acc[i], alpha * acc[i + 1]);
            }
        }
        fence_proxy_async_smem();
        named_barrier_sync(barrier, 128);
        if (t == 0) {
            tma_store_2d(map_c, buf, col0 + box * EPI_BOX_COLS, row0);
            tma_store_commit();
        }
    }
}

// Any beta: guarded stores of adjacent column pairs straight from the accumulators, C read only when
// beta != 0 (with UNALIGNED_C each pair checks its alignment and N: store_pair_any).
template <int NACC>
__device__ __forceinline__ void epilogue_direct(const float (&acc)[NACC], T_OUT* C, int M, int N, long long ldc,
                                                int row0, int col0, float alpha, float beta) {
    const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
    const int row = row0 + warp * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < NACC / 4; ++j) {
        const int col = col0 + j * 8 + (lane % 4) * 2;
        if (col >= N) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = row + 8 * h;
{% if UNALIGNED_C %}
            if (r < M) store_pair_any(C + offset(r, col, ldc), col, N, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1], alpha,
                                      beta);
{% else %}
            if (r < M) store_pair(C + offset(r, col, ldc), acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1], alpha, beta);
{% endif %}
        }
    }
}
