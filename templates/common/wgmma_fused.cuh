// ---- the fused epilogue on a consumer warpgroup's 64×N accumulator tile (needs apply_epilogue) ------
// Accumulator register i of thread t holds row 16*(t/32) + (t%32)/4 + 8*((i/2)%2), column 8*(i/4) +
// 2*(t%4) + i%2 of the tile at (row0, col0). In place, once, before either store path: acc[i] becomes
// apply_epilogue(alpha·acc + beta·C) of its element of C, so the stores write acc as it is. One copy of the
// epilogue's code rather than one per store path keeps the 128-accumulator tiles clear of spills. C is
// read only when beta != 0. Elements past M or N keep alpha·acc (the stores drop them).
template <int NACC>
__device__ __forceinline__ void epilogue_in_place(float (&acc)[NACC], const T_IN* C, long long ldc, int M, int N,
                                                  int row0, int col0, float alpha, float beta,
                                                  const EpilogueParams& epi) {
    const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
#pragma unroll
    for (int i = 0; i < NACC; ++i) {
        const int row = row0 + warp * 16 + lane / 4 + 8 * ((i / 2) % 2);
        const int col = col0 + 8 * (i / 4) + 2 * (lane % 4) + i % 2;
        float x = alpha * acc[i];
        if (row < M && col < N) {
            if (beta != 0.f) x = fmaf(beta, to_float(C[offset(row, col, ldc)]), x);
            x = apply_epilogue(x, row, col, epi);
        }
        acc[i] = x;
    }
}
