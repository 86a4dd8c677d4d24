// ---- epilogue: C = alpha * acc + beta * C, guarded (store_c_at: prelude.cuh) -----------------------
template <typename T>
__device__ __forceinline__ void store_c(T* __restrict__ C, long long ldc, int M, int N, int row, int col,
                                        float acc, float alpha, float beta) {
    if (row < M && col < N) store_c_at(C + offset(row, col, ldc), acc, alpha, beta);
}

// 1 + erf(x) in straight-line code, for the GELU of fused epilogues: erfc(|x|) by the Chebyshev fit of
// Numerical Recipes' erfcc (fractional error below 1.2e-7), then 2 - erfc or erfc by the sign. erff's own
// two-range branch would serialise the many accumulators a thread applies it to.
__device__ __forceinline__ float one_plus_erff(float x) {
    const float z = fabsf(x), t = __fdividef(1.0f, fmaf(0.5f, z, 1.0f));
    float p = 0.17087277f;
    p = fmaf(p, t, -0.82215223f);
    p = fmaf(p, t, 1.48851587f);
    p = fmaf(p, t, -1.13520398f);
    p = fmaf(p, t, 0.27886807f);
    p = fmaf(p, t, -0.18628806f);
    p = fmaf(p, t, 0.09678418f);
    p = fmaf(p, t, 0.37409196f);
    p = fmaf(p, t, 1.00002368f);
    p = fmaf(p, t, -1.26551223f);
    const float erfc = t * expf(fmaf(-z, z, p));
    return x >= 0.f ? 2.0f - erfc : erfc;
}
