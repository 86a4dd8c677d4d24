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
