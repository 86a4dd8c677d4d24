// ---- unaligned operands: guarded element-wise moves for variants with UNALIGNED = 1 -------------------
// Such a variant declares align = 1: K, N, every leading dimension and every base address may be aligned to
// the element only, so a 16-byte chunk of a row can straddle the matrix edge or a 16-byte boundary. A chunk
// moves as one vector access where it happens to be aligned and wholly inside the matrix, else element by
// element, each guarded; elements past the edge read as zero and are never written. Needs common/vec.cuh
// and, for the stores, common/epilogue_vec.cuh. Row-major C only.
static_assert(!COL_MAJOR, "the unaligned stores walk C's rows");

__device__ __forceinline__ bool aligned_to(const void* p, int bytes) {
    return (reinterpret_cast<unsigned long long>(p) & (bytes - 1)) == 0;
}

// 16 bytes of consecutive elements from src, of which the first `valid` lie inside the matrix: those are
// read, the rest are zero bits (+0 in every element type here). valid <= 0 reads nothing.
template <typename T>
__device__ __forceinline__ uint4 load_chunk(const T* src, int valid) {
    constexpr int VEC = 16 / (int)sizeof(T);
    if (valid >= VEC && aligned_to(src, 16)) return __ldg(reinterpret_cast<const uint4*>(src));
    using Bits = typename VecOf<sizeof(T)>::type;  // the element as an unsigned integer of its size
    const Bits* s = reinterpret_cast<const Bits*>(src);
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        if constexpr (sizeof(T) == 4) {
            w[i] = i < valid ? __ldg(s + i) : 0u;
        } else {  // two 16-bit elements per word, the first in the low half
            const unsigned lo = 2 * i < valid ? (unsigned)__ldg(s + 2 * i) : 0u;
            const unsigned hi = 2 * i + 1 < valid ? (unsigned)__ldg(s + 2 * i + 1) : 0u;
            w[i] = lo | hi << 16;
        }
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// load_chunk of four floats, as the fp32 kernels keep them
__device__ __forceinline__ float4 load_f32_chunk(const float* src, int valid) {
    const uint4 v = load_chunk(src, valid);
    return make_float4(__uint_as_float(v.x), __uint_as_float(v.y), __uint_as_float(v.z), __uint_as_float(v.w));
}

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
