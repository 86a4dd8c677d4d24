// ---- 3xTF32: an fp32 value as the sum of two tf32 values -----------------------------------------
// x = big + small with big = tf32(x) and small = tf32(x - big). x - big is exact in fp32 (it is the
// low 13 bits of x's significand), and rounding it to tf32 keeps 11 of those bits, so big + small holds
// x to about 2^-22 of its size: big·big + big·small + small·big misses only small·small (2^-22 of the
// product) and the rounding of small. Both parts are fp32 bit patterns whose 13 low mantissa bits are
// zero, which the tensor cores read exactly as tf32.
// Rounding to nearest, ties away from zero (cvt.rna's rule), in integer instructions: add half a tf32
// unit to the magnitude bits, clear the 13 low ones. cvt.rna.tf32.f32 itself costs several on sm_90 (it
// screens out inf and NaN), and the split sits on the converters' and consumers' issue slots. Finite
// inputs get cvt.rna's bits (tests/gpu/test_3xtf32_gpu.py compares them), an inf stays inf, but the
// carry can wrap a NaN with high payload bits into a zero: big may be anything for a NaN input.
__device__ __forceinline__ unsigned round_tf32(float x) {
    return (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
}

// The same for x - big, which carries a NaN through: it is NaN exactly where x is inf or NaN, and a NaN
// computed by an fp32 add is the canonical 0x7fffffff, which the clamp keeps from wrapping (it stays NaN);
// the clamp changes no other input (finite values and infinities lie below it as signed integers).
__device__ __forceinline__ unsigned round_tf32_keep_nan(float x) {
    return (unsigned)(min((int)__float_as_uint(x), 0x7fffefff) + 0x1000) & 0xffffe000u;
}

__device__ __forceinline__ void split_tf32(float x, unsigned& big, unsigned& small) {
    big = round_tf32(x);
    small = round_tf32_keep_nan(x - __uint_as_float(big));
}

// Splits CHUNKS 16-byte chunks of fp32 in shared memory, `apart` bytes apart from `src` on, every load
// issued before any chunk is split: the small parts go to the same offsets from `small_dst` (so both keep
// the layout, swizzle included, TMA wrote), the big parts back to `src`.
// TRUNCATED: big = x as it stands, which the tensor cores read truncated to tf32 (they ignore the 13 low
// mantissa bits), so small = tf32(x - trunc(x)) and `src` is left as it is (a third less of the
// converters' traffic). Truncation makes |small| up to one tf32 unit (2^-10 of x), twice the rounded
// split's, so small·small grows to 2^-21 of the product.
template <bool TRUNCATED, int CHUNKS>
__device__ __forceinline__ void split_tf32_smem(unsigned src, unsigned small_dst, unsigned apart) {
    float x[CHUNKS][4];
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c)
        asm volatile("ld.shared.v4.f32 { %0, %1, %2, %3 }, [%4];\n"
                     : "=f"(x[c][0]), "=f"(x[c][1]), "=f"(x[c][2]), "=f"(x[c][3]) : "r"(src + c * apart) : "memory");
    unsigned big[CHUNKS][4], small[CHUNKS][4];
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            if constexpr (TRUNCATED)
                small[c][i] = round_tf32_keep_nan(x[c][i] - __uint_as_float(__float_as_uint(x[c][i]) & 0xffffe000u));
            else split_tf32(x[c][i], big[c][i], small[c][i]);
        }
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
        if constexpr (!TRUNCATED)
            asm volatile("st.shared.v4.b32 [%0], { %1, %2, %3, %4 };\n"
                         :: "r"(src + c * apart), "r"(big[c][0]), "r"(big[c][1]), "r"(big[c][2]), "r"(big[c][3]) : "memory");
        asm volatile("st.shared.v4.b32 [%0], { %1, %2, %3, %4 };\n"
                     :: "r"(small_dst + c * apart), "r"(small[c][0]), "r"(small[c][1]), "r"(small[c][2]), "r"(small[c][3])
                     : "memory");
    }
}

// Splits a landed K-major stage of BYTES bytes at `src` (big parts in place, small ones at `small_dst`),
// `thread` of `threads` taking every threads-th 16-byte chunk: consecutive threads, consecutive chunks,
// so the accesses are conflict-free and blind to the layout (the swizzle stays as TMA wrote it). Two
// chunks a turn, both loads issued before either is split, so one load's latency hides the other's.
template <bool TRUNCATED, int BYTES>
__device__ __forceinline__ void split_stage_tf32(unsigned src, unsigned small_dst, int thread, int threads) {
    int i = thread;
    for (; i + threads < BYTES / 16; i += 2 * threads)
        split_tf32_smem<TRUNCATED, 2>(src + 16 * i, small_dst + 16 * i, 16 * threads);
    if (i < BYTES / 16) split_tf32_smem<TRUNCATED, 1>(src + 16 * i, small_dst + 16 * i, 0);
}

__device__ __forceinline__ float ld_shared_f32(unsigned addr) {
    float x;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(x) : "r"(addr) : "memory");
    return x;
}
