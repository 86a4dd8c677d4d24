// ---- runs of elements: vector copies that may change type on the way --------------------------------
// Needs common/vec.cuh (copy_vec). A run of N consecutive elements moves in accesses of up to 16 bytes;
// both ends must be aligned to min(16, N * sizeof(T)) bytes. copy_run_cvt converts element by element
// in registers when the types differ (half in global memory, float in shared memory or registers).
template <typename A, typename B> struct same_type { static constexpr bool value = false; };
template <typename A> struct same_type<A, A> { static constexpr bool value = true; };

template <bool COND, typename T, typename F> struct pick_type { using type = T; };
template <typename T, typename F> struct pick_type<false, T, F> { using type = F; };

__device__ __forceinline__ void cast_to(half& d, half s) { d = s; }
__device__ __forceinline__ void cast_to(float& d, half s) { d = __half2float(s); }
__device__ __forceinline__ void cast_to(float& d, float s) { d = s; }
__device__ __forceinline__ void cast_to(half& d, float s) { d = __float2half_rn(s); }

template <int N, typename T>
__device__ __forceinline__ void copy_run(T* dst, const T* src) {
    constexpr int CHUNK = N * (int)sizeof(T) > 16 ? 16 / (int)sizeof(T) : N;
    static_assert(N % CHUNK == 0, "a run longer than 16 bytes is a whole number of 16-byte accesses");
#pragma unroll
    for (int i = 0; i < N; i += CHUNK) copy_vec<T, CHUNK>(dst + i, src + i);
}

template <int N, typename TD, typename TS>
__device__ __forceinline__ void copy_run_cvt(TD* dst, const TS* src) {
    if constexpr (same_type<TD, TS>::value) {
        copy_run<N>(dst, src);
    } else {
        alignas(16) TS in[N];
        alignas(16) TD out[N];
        copy_run<N>(in, src);
#pragma unroll
        for (int i = 0; i < N; ++i) cast_to(out[i], in[i]);
        copy_run<N>(dst, out);
    }
}
