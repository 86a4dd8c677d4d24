// ---- warp-level tensor-core PTX (sm_80+): ldmatrix and mma.sync ------------------------------------
// Shared-memory addresses are 32-bit (smem_addr, from the prelude): the .shared state space.
//
// ldmatrix.m8n8 loads 8x8 matrices of 16-bit elements: lanes 8j..8j+7 give the addresses of the eight
// 16-byte rows of matrix j; every lane receives one 32-bit register per matrix, holding row lane/4,
// elements 2*(lane%4) and +1 (with .trans: column lane/4, rows 2*(lane%4) and +1). On 32-bit data
// (tf32) a row is 4 elements and lane gets row lane/4, element lane%4.
__device__ __forceinline__ void ldmatrix_x1(unsigned& r0, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 { %0}, [%1];\n" : "=r"(r0) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x2(unsigned& r0, unsigned& r1, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 { %0, %1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 { %0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x1_trans(unsigned& r0, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 { %0}, [%1];\n" : "=r"(r0) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x2_trans(unsigned& r0, unsigned& r1, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 { %0, %1}, [%2];\n"
                 : "=r"(r0), "=r"(r1) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3,
                                                  unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 { %0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}

// Accumulators of one m16n8 tile. Lane l holds rows l/4 and l/4 + 8, columns 2*(l%4) and +1:
// r[0], r[1] (row l/4) and r[2], r[3] (row l/4 + 8) as floats, or the same as two half2 registers.
template <bool HALF_ACC> struct AccFrag { float r[4]; };
template <> struct AccFrag<true> { unsigned r[2]; };

// D = A * B + D. A fragment (16x16, row-major): a[0] rows 0-7 k 0-7, a[1] rows 8-15 k 0-7, a[2] rows
// 0-7 k 8-15, a[3] rows 8-15 k 8-15. B fragment (16x8, "col"): b[0] k 0-7, b[1] k 8-15.
__device__ __forceinline__ void mma_m16n8k16_f16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 { %0, %1, %2, %3}, { %4, %5, %6, %7}, "
                 "{ %8, %9}, { %0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_m16n8k16_f16(unsigned (&d)[2], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 { %0, %1}, { %2, %3, %4, %5}, { %6, %7}, "
                 "{ %0, %1};\n"
                 : "+r"(d[0]), "+r"(d[1])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 { %0, %1, %2, %3}, { %4, %5, %6, %7}, "
                 "{ %8, %9}, { %0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// TF32, k = 8: a[0] (row l/4, k l%4), a[1] (row +8), a[2] (k +4), a[3] (row +8, k +4); b[0] (k l%4,
// column l/4), b[1] (k +4). Operands must already be tf32 (to_tf32), or the low mantissa bits are cut.
__device__ __forceinline__ void mma_m16n8k8_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 { %0, %1, %2, %3}, { %4, %5, %6, %7}, "
                 "{ %8, %9}, { %0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// fp32 -> tf32 (10-bit mantissa), rounded to nearest with ties away from zero, in a register.
__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}
