// ---- the fused epilogue on a consumer warpgroup's 64×N accumulator tile (needs apply_epilogue) ------
// Accumulator register i of thread t holds row 16*(t/32) + (t%32)/4 + 8*((i/2)%2), column 8*(i/4) +
// 2*(t%4) + i%2 of the tile at (row0, col0). In place, once, before either store path: acc[i] becomes
// apply_epilogue(alpha·acc + beta·C) of its element of C, so the stores write acc as it is. One copy of the
// epilogue's code rather than one per store path keeps the 128-accumulator tiles clear of spills. C is
// read only when beta != 0. Elements past M or N keep alpha·acc (the stores drop them).
template <int NACC>
__device__ __forceinline__ void epilogue_in_place(float (&acc)[NACC], const T_OUT* C, long long ldc, int M, int N,
                                                  int row0, int col0, float alpha, float beta,
                                                  const EpilogueParams& epi) {
    const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
    const int row = row0 + warp * 16 + lane / 4;  // and row + 8
    // Chunks of 8 accumulators (16 columns, two rows): a chunk inside C runs straight-line, so its
    // elements' operand loads and arithmetic overlap; one at C's edge checks each element. The barrier
    // between chunks keeps the compiler from hoisting loads across them, which would spill.
#pragma unroll
    for (int i0 = 0; i0 < NACC; i0 += 8) {
        if (row + 8 < M && col0 + 8 * (i0 / 4) + 15 < N) {
#pragma unroll
            for (int i = i0; i < i0 + 8; ++i) {
                const int r = row + 8 * ((i / 2) % 2), col = col0 + 8 * (i / 4) + 2 * (lane % 4) + i % 2;
                float x = alpha * acc[i];
                if (beta != 0.f) x = fmaf(beta, to_float(C[offset(r, col, ldc)]), x);
                acc[i] = apply_epilogue(x, r, col, epi);
            }
        } else {
#pragma unroll
            for (int i = i0; i < i0 + 8; ++i) {
                const int r = row + 8 * ((i / 2) % 2), col = col0 + 8 * (i / 4) + 2 * (lane % 4) + i % 2;
                float x = alpha * acc[i];
                if (r < M && col < N) {
                    if (beta != 0.f) x = fmaf(beta, to_float(C[offset(r, col, ldc)]), x);
                    x = apply_epilogue(x, r, col, epi);
                }
                acc[i] = x;
            }
        }
        asm volatile("" ::: "memory");
    }
}
