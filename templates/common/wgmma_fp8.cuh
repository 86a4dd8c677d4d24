// ---- fp8 wgmma (sm_90a): m64nNk32, N = INSTR_N, from shared-memory descriptors, fp32 accumulators ---
{% from "common/wgmma_asm.cuh" import acc_registers, acc_constraints %}
// Needs INSTR_N (the instruction's N), FORMAT_A and FORMAT_B (0 = e4m3, 1 = e5m2) in the render context.
// fp8 wgmma has no transpose bit: A and B are both K-major (rows of K contiguous bytes) in shared memory.
// The descriptors, fences, commit/wait and setmaxnreg come from common/wgmma.cuh.
{% set NACC = INSTR_N // 2 %}
{% set FMT = ["e4m3", "e5m2"] %}

// k depth of one instruction: 32 bytes of each operand row, as for the 16-bit and tf32 instructions
constexpr int FP8_WGMMA_K = 32;

// D(64×{{ INSTR_N }}, fp32) = A(64×32, {{ FMT[FORMAT_A] }}) · B(32×{{ INSTR_N }}, {{ FMT[FORMAT_B] }})
//     + (accumulate ? D : 0).
// Accumulator register i of thread t of the warpgroup holds row 16*(t/32) + (t%32)/4 + 8*((i/2)%2),
// column 8*(i/4) + 2*(t%4) + i%2. The tensor core adds the products of one instruction into D with
// fewer than fp32's bits (about 14 were measured elsewhere), which is why the kernel promotes.
__device__ __forceinline__ void wgmma_fp8_async(float (&d)[{{ NACC }}], unsigned long long desc_a,
                                                unsigned long long desc_b, int accumulate) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %{{ NACC + 2 }}, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n{{ INSTR_N }}k32.f32.{{ FMT[FORMAT_A] }}.{{ FMT[FORMAT_B] }}\n {"
{{ acc_registers(NACC) | trim("\n") }}
        "},\n %{{ NACC }}, %{{ NACC + 1 }}, p, 1, 1;\n}\n"
{{ acc_constraints(NACC) | trim("\n") }}
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
