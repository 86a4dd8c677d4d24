// ---- cupy-gemm prelude: types and constants every template shares -------------------------------
// Rendered variant: {{ VARIANT }} (family {{ FAMILY }}); inputs {{ DTYPE }}, accumulate {{ ACC }}, {{ LAYOUT }}-major.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

using T_IN = {{ T_IN }};    // element type of A and B (and of C, unless the family converts)
using T_OUT = {{ T_OUT }};  // element type of C where the family converts (Family.convert); else T_IN
using T_ACC = {{ T_ACC }};  // accumulator type
constexpr int THREADS = {{ THREADS }};
// Column-major (BLAS convention) when true: element (r, c) of a matrix with leading dimension ld
// is at r + c*ld instead of r*ld + c.
constexpr bool COL_MAJOR = {{ 1 if LAYOUT == "col" else 0 }};

// 64-bit offsets: M*lda can pass 2^31 long before M, N or K do.
__device__ __forceinline__ long long offset(int r, int c, long long ld) {
    return COL_MAJOR ? (long long)r + (long long)c * ld : (long long)r * ld + (long long)c;
}

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ half from_float<half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// C = alpha * acc + beta * C at one element. C is read only when beta != 0, so a C that holds garbage (or
// NaN) is fine for beta = 0, as BLAS says.
template <typename T>
__device__ __forceinline__ void store_c_at(T* __restrict__ p, float acc, float alpha, float beta) {
    float v = alpha * acc;
    if (beta != 0.f) v = fmaf(beta, to_float(*p), v);
    *p = from_float<T>(v);
}

// The 32-bit .shared address of a pointer into shared memory (what cp.async, ldmatrix, mbarriers, TMA and
// wgmma descriptors take).
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

template <typename T> __device__ __forceinline__ T zero() { return from_float<T>(0.f); }

// acc += a * b in the accumulator's precision
__device__ __forceinline__ void mac(float& acc, float a, float b) { acc = fmaf(a, b, acc); }
__device__ __forceinline__ void mac(float& acc, half a, half b) { acc = fmaf(__half2float(a), __half2float(b), acc); }
__device__ __forceinline__ void mac(float& acc, __nv_bfloat16 a, __nv_bfloat16 b) {
    acc = fmaf(__bfloat162float(a), __bfloat162float(b), acc);
}
__device__ __forceinline__ void mac(half& acc, half a, half b) { acc = __hfma(a, b, acc); }

// Programmatic dependent launch: families with pdl=True (cupy_gemm/driver.py) are launched so that they may
// start while the previous kernel on the stream still runs, and call pdl_wait() before their first access
// to global memory: it returns once that kernel has finished and its writes are visible. pdl_allow_next()
// lets the next such launch get its blocks resident and through their prologue now. Only kernels that hold
// an SM alone call it (one block, shared memory full): waiting blocks placed beside running ones of a
// CUDA-core kernel slowed it by up to a third (fp32 split-K 32×64 tiles on an H100). Both are no-ops
// without the launch attribute, and before sm_90.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_allow_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
