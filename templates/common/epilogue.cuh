// ---- epilogue: C = alpha * acc + beta * C, guarded ------------------------------------------------
// C is read only when beta != 0, so a C that holds garbage (or NaN) is fine for beta = 0, as BLAS says.
template <typename T>
__device__ __forceinline__ void store_c(T* __restrict__ C, long long ldc, int M, int N, int row, int col,
                                        float acc, float alpha, float beta) {
    if (row >= M || col >= N) return;
    T* p = C + offset(row, col, ldc);
    float v = alpha * acc;
    if (beta != 0.f) v = fmaf(beta, to_float(*p), v);
    *p = from_float<T>(v);
}

// An extra operand of a fused epilogue (cupy_gemm/epilogue.py): float32, float16 or bfloat16 by `dtype`.
__device__ __forceinline__ float load_operand(const void* p, int dtype, long long at) {
    if (dtype == 1) return __half2float(static_cast<const half*>(p)[at]);
    if (dtype == 2) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[at]);
    return static_cast<const float*>(p)[at];
}
