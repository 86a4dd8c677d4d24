// ---- WMMA fragments to and from shared memory, with the state space spelled out -----------------
// Needs <mma.h> (smem_addr comes from the prelude). mma.h loads bf16 and tf32 fragments (and stores
// the tf32 accumulator) through generic addresses that NVVM does not narrow to shared memory, as it
// does for f16: a bf16 fragment then costs one generic load per element instead of one ldmatrix, a
// tf32 one generic loads instead of shared loads. These overloads issue the same PTX wmma.load /
// wmma.store with .shared; register order is the fragment's element order, as in mma.h. Every other
// fragment goes through the wmma API. `p` must point into shared memory.
template <typename Frag, typename T>
__device__ __forceinline__ void wmma_load_shared(Frag& f, const T* p, unsigned ldm) {
    nvcuda::wmma::load_matrix_sync(f, p, ldm);
}

template <typename Frag, typename T>
__device__ __forceinline__ void wmma_store_shared(T* p, const Frag& f, unsigned ldm) {
    nvcuda::wmma::store_matrix_sync(p, f, ldm, nvcuda::wmma::mem_row_major);
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800  // bf16 and tf32 fragments exist from sm_80 on
#define CUPY_GEMM_WMMA_LD2(OP, SHAPE_TYPE)                                                              \
    unsigned* r = reinterpret_cast<unsigned*>(f.x);                                                   \
    asm volatile("wmma.load." OP ".sync.aligned.row." SHAPE_TYPE " { %0, %1}, [%2], %3;\n"               \
                 : "=r"(r[0]), "=r"(r[1]) : "r"(smem_addr(p)), "r"(ldm) : "memory")
#define CUPY_GEMM_WMMA_LD4(OP, SHAPE_TYPE)                                                              \
    unsigned* r = reinterpret_cast<unsigned*>(f.x);                                                   \
    asm volatile("wmma.load." OP ".sync.aligned.row." SHAPE_TYPE " { %0, %1, %2, %3}, [%4], %5;\n"       \
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)), "r"(ldm) : "memory")
#define CUPY_GEMM_WMMA_LD8(OP, SHAPE_TYPE)                                                              \
    unsigned* r = reinterpret_cast<unsigned*>(f.x);                                                   \
    asm volatile("wmma.load." OP ".sync.aligned.row." SHAPE_TYPE                                        \
                 " { %0, %1, %2, %3, %4, %5, %6, %7}, [%8], %9;\n"                                      \
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]),  \
                   "=r"(r[7]) : "r"(smem_addr(p)), "r"(ldm) : "memory")

template <int M_, int N_, int K_, typename T, typename L>
using WmmaA = nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, M_, N_, K_, T, L>;
template <int M_, int N_, int K_, typename T, typename L>
using WmmaB = nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, M_, N_, K_, T, L>;
using RowMajor = nvcuda::wmma::row_major;
using Tf32 = nvcuda::wmma::precision::tf32;

__device__ __forceinline__ void wmma_load_shared(WmmaA<16, 16, 16, __nv_bfloat16, RowMajor>& f,
                                                 const __nv_bfloat16* p, unsigned ldm) {
    CUPY_GEMM_WMMA_LD4("a", "m16n16k16.shared.bf16");
}
__device__ __forceinline__ void wmma_load_shared(WmmaB<16, 16, 16, __nv_bfloat16, RowMajor>& f,
                                                 const __nv_bfloat16* p, unsigned ldm) {
    CUPY_GEMM_WMMA_LD4("b", "m16n16k16.shared.bf16");
}
__device__ __forceinline__ void wmma_load_shared(WmmaA<32, 8, 16, __nv_bfloat16, RowMajor>& f,
                                                 const __nv_bfloat16* p, unsigned ldm) {
    CUPY_GEMM_WMMA_LD8("a", "m32n8k16.shared.bf16");
}
__device__ __forceinline__ void wmma_load_shared(WmmaB<32, 8, 16, __nv_bfloat16, RowMajor>& f,
                                                 const __nv_bfloat16* p, unsigned ldm) {
    CUPY_GEMM_WMMA_LD2("b", "m32n8k16.shared.bf16");
}
__device__ __forceinline__ void wmma_load_shared(WmmaA<8, 32, 16, __nv_bfloat16, RowMajor>& f,
                                                 const __nv_bfloat16* p, unsigned ldm) {
    CUPY_GEMM_WMMA_LD2("a", "m8n32k16.shared.bf16");
}
__device__ __forceinline__ void wmma_load_shared(WmmaB<8, 32, 16, __nv_bfloat16, RowMajor>& f,
                                                 const __nv_bfloat16* p, unsigned ldm) {
    CUPY_GEMM_WMMA_LD8("b", "m8n32k16.shared.bf16");
}
__device__ __forceinline__ void wmma_load_shared(WmmaA<16, 16, 8, Tf32, RowMajor>& f, const float* p, unsigned ldm) {
    CUPY_GEMM_WMMA_LD4("a", "m16n16k8.shared.tf32");
}
__device__ __forceinline__ void wmma_load_shared(WmmaB<16, 16, 8, Tf32, RowMajor>& f, const float* p, unsigned ldm) {
    CUPY_GEMM_WMMA_LD4("b", "m16n16k8.shared.tf32");
}
__device__ __forceinline__ void wmma_store_shared(
        float* p, const nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 8, float>& f, unsigned ldm) {
    asm volatile("wmma.store.d.sync.aligned.row.m16n16k8.shared.f32 [%0], { %1, %2, %3, %4, %5, %6, %7, %8}, %9;\n"
                 :: "r"(smem_addr(p)), "f"(f.x[0]), "f"(f.x[1]), "f"(f.x[2]), "f"(f.x[3]), "f"(f.x[4]),
                    "f"(f.x[5]), "f"(f.x[6]), "f"(f.x[7]), "r"(ldm) : "memory");
}
#undef CUPY_GEMM_WMMA_LD2
#undef CUPY_GEMM_WMMA_LD4
#undef CUPY_GEMM_WMMA_LD8
#endif
