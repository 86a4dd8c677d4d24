// ---- 3xTF32 on wgmma (sm_90a): one pipeline stage's three products, and their promotion ------------
// Needs common/wgmma.cuh and common/wgmma_rs.cuh (the register-operand instruction) included first.

// One stage's products into d, for each m64 tile mi and k8 step kk: the register operand's parts (reg_big,
// reg_small: fragments split in registers) against the shared-memory operand's (smem_big(kk),
// smem_small(kk): descriptors of the parts the converters wrote). Small products first: they are 2^-11 of
// the big ones, so adding them into a fresh partial loses nothing to the tensor cores' truncation; then
// big·big. fresh: the first instruction overwrites d. One commit group; the fragments stay locked until a
// wait covers it.
template <int MI, int KSTEPS, int NACC, class BigDesc, class SmallDesc>
__device__ __forceinline__ void wgmma_3xtf32_stage(float (&d)[MI][NACC], const unsigned (&reg_big)[MI][KSTEPS][4],
                                                   const unsigned (&reg_small)[MI][KSTEPS][4], BigDesc smem_big,
                                                   SmallDesc smem_small, bool fresh) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk)
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
            wgmma_rs_async(d[mi], reg_small[mi][kk], smem_big(kk), !(fresh && kk == 0));
            wgmma_rs_async(d[mi], reg_big[mi][kk], smem_small(kk), 1);
        }
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk)
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) wgmma_rs_async(d[mi], reg_big[mi][kk], smem_big(kk), 1);
    wgmma_commit();
}

// A finished stage's partial tile into the fp32 accumulators, with round-to-nearest adds.
template <int MI, int NACC>
__device__ __forceinline__ void promote_partial(float (&acc)[MI][NACC], float (&part)[MI][NACC]) {
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int i = 0; i < NACC; ++i) {
            fence_operand(part[mi][i]);
            acc[mi][i] += part[mi][i];
        }
}
