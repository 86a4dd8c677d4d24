// ---- unaligned operands: guarded stores for variants with UNALIGNED = 1 ------------------------------
// Such a variant declares align = 1: C's rows, ldc and base may be aligned to the element only. Its loads
// are common/unaligned_load.cuh's (included first); the stores need common/epilogue_vec.cuh. Row-major C
// only.
static_assert(!COL_MAJOR, "the unaligned stores walk C's rows");

// C = alpha·acc + beta·C (then the fused epilogue, if any) for VEC consecutive elements of row `row` from
// column `col`: store_c_vec's one vector access when all VEC are inside C and their address is aligned to
// the vector, else one guarded element at a time. C is read only when beta != 0, as in store_c_vec.
template <int VEC, typename T, typename TA>
__device__ __forceinline__ void store_c_any(T* __restrict__ C, long long ldc, int M, int N, int row, int col,
                                            const TA (&acc)[VEC], float alpha, float beta{% if EPILOGUE %}, const EpilogueParams& epi{% endif %}) {
    if (row >= M || col >= N) return;
    if (col + VEC <= N && aligned_to(C + offset(row, col, ldc), VEC * (int)sizeof(T))) {
        store_c_vec<VEC>(C, ldc, M, N, row, col, acc, alpha, beta{% if EPILOGUE %}, epi{% endif %});
        return;
    }
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        const TA one[1] = {acc[i]};
        store_c_vec<1>(C, ldc, M, N, row, col + i, one, alpha, beta{% if EPILOGUE %}, epi{% endif %});  // guarded
    }
}
