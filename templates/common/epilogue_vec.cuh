// ---- vectorised epilogue: VEC consecutive elements along C's contiguous dimension, one access each way
// (columns when row-major, rows when column-major). Needs common/vec.cuh. For families whose `align`
// makes that dimension's extent, ldc and C's base multiples of VEC: the VEC
// elements are then all inside C or all outside, and their address is aligned to the vector size, so
// one bounds check and one access cover them. C is read only when beta != 0, as in store_c.
template <int VEC, typename T, typename TA>
__device__ __forceinline__ void store_c_vec(T* __restrict__ C, long long ldc, int M, int N, int row, int col,
                                            const TA (&acc)[VEC], float alpha, float beta{% if EPILOGUE %}, const EpilogueParams& epi{% endif %}) {
    if (row >= M || col >= N) return;
    T* p = C + offset(row, col, ldc);
    alignas(16) T old[VEC];
    alignas(16) T out[VEC];
    if (beta != 0.f) copy_vec<T, VEC>(old, p);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        float v = alpha * to_float(acc[i]);
        if (beta != 0.f) v = fmaf(beta, to_float(old[i]), v);
{% if EPILOGUE %}
        // the fused epilogue: every store of a kernel that has one passes epi, so none can skip it
        v = apply_epilogue(v, COL_MAJOR ? row + i : row, COL_MAJOR ? col : col + i, epi);
{% endif %}
        out[i] = from_float<T>(v);
    }
    copy_vec<T, VEC>(p, out);
}
