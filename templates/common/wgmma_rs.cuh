// ---- wgmma with A from registers (sm_90a), tf32 ----------------------------------------------------
{% from "common/wgmma_asm.cuh" import acc_registers, acc_constraints %}
// Needs BN (the instruction's N) in the render context, like common/wgmma.cuh.
{% set NACC = BN // 2 %}
// D(64×{{ BN }}, fp32) = A(64×8) · B(8×{{ BN }}) + (accumulate ? D : 0) with A's tf32 fragment in four
// registers and B K-major in shared memory (descriptor). A fragment register i of thread t of the
// warpgroup holds A[16*(t/32) + (t%32)/4 + 8*(i%2)][(t%4) + 4*(i/2)] (the PTX ISA's m64nNk8 tf32 layout).
// The fragment registers must not change until a wgmma.wait_group has covered this instruction.
__device__ __forceinline__ void wgmma_rs_async(float (&d)[{{ NACC }}], const unsigned (&a)[4],
                                               unsigned long long desc_b, int accumulate) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %{{ NACC + 5 }}, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n{{ BN }}k8.f32.tf32.tf32\n {"
{{ acc_registers(NACC) | trim("\n") }}
        "},\n { %{{ NACC }}, %{{ NACC + 1 }}, %{{ NACC + 2 }}, %{{ NACC + 3 }} }, %{{ NACC + 4 }}, p, 1, 1;\n}\n"
{{ acc_constraints(NACC) | trim("\n") }}
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}
