// ---- wgmma (sm_90a): warpgroup matrix multiply-accumulate from shared-memory descriptors ------------
{% from "common/wgmma_asm.cuh" import acc_registers, acc_constraints %}
// Needs BN (the instruction's N; above 256, two instructions: below) and DTYPE in the render context: the
// instruction's operand list has N / 2 accumulator registers, written out, since inline PTX cannot take a
// register array.
// 16-bit inputs (f16, bf16) run m64nBNk16 with A K-major and B N-major (the transpose bit); float32
// inputs run m64nBNk8 as tf32, which has no transpose bit: both operands K-major.
{% set AB = {"float16": "f16", "bfloat16": "bf16", "float32": "tf32"}[DTYPE] %}
{% set WK = 8 if DTYPE == "float32" else 16 %}

// Shared-memory matrix descriptor for a tile stored in swizzled rows of SW bytes (128, 64 or 32: the
// layouts TMA writes with CU_TENSOR_MAP_SWIZZLE_128B, _64B, _32B): start address, leading and stride byte
// offsets (all >> 4), and the swizzle mode (1, 2 or 3) in bits 62-63. The pattern repeats every 8 rows, so
// tiles start on a multiple of 8 rows (1024 bytes for 128-byte rows) and the base-offset field stays 0.
// Built from the run-time address: NVRTC has been seen to crash on wgmma whose descriptors were
// compile-time constants.
template <int SW>
__device__ __forceinline__ unsigned long long smem_desc_swizzled(unsigned addr, unsigned lbo, unsigned sbo) {
    static_assert(SW == 128 || SW == 64 || SW == 32, "a swizzle of 128, 64 or 32 bytes");
    return (unsigned long long)((addr & 0x3FFFF) >> 4)
         | (unsigned long long)((lbo & 0x3FFFF) >> 4) << 16
         | (unsigned long long)((sbo & 0x3FFFF) >> 4) << 32
         | (unsigned long long)(SW == 128 ? 1 : SW == 64 ? 2 : 3) << 62;
}

// The 128-byte rows most tiles use
__device__ __forceinline__ unsigned long long smem_desc_sw128(unsigned addr, unsigned lbo, unsigned sbo) {
    return smem_desc_swizzled<128>(addr, lbo, sbo);
}

// Orders this warpgroup's register and shared-memory accesses before the wgmma that follow.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Wait until at most N committed groups are still running.
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory"); }

// Keeps the compiler from moving reads of an accumulator above the wgmma.wait_group that completes it.
__device__ __forceinline__ void fence_operand(float& x) { asm volatile("" : "+f"(x) :: "memory"); }

// Hand registers between warpgroups: the producer needs few, the consumers hold the accumulators.
// Takes effect only under a register cap at entry: __launch_bounds__(THREADS, 1).
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(REGS)); }
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(REGS)); }
// Whether a hand-over fits the registers the launch gave the block: `threads` times ptxas's even share
// under __launch_bounds__(threads, 1) (65536 / threads, in steps of 8). setmaxnreg.inc waits until
// the registers are free, so consumers may gain only what the producer gives up: an overdraw hangs.
__host__ __device__ constexpr bool register_handover_fits(int threads, int consumers, int producer_regs, int consumer_regs) {
    return consumers == 1 || producer_regs + consumers * consumer_regs <= (consumers + 1) * (65536 / threads / 8 * 8);
}
#define HANDOVER_MESSAGE "the register hand-over must fit the registers the launch gave (else setmaxnreg.inc waits forever)"

// k depth of one instruction: 32 bytes of each operand row (16 16-bit elements, 8 tf32)
constexpr int WGMMA_K = {{ WK }};

// D(64×{{ BN }}, fp32) = A(64×{{ WK }}) · B({{ WK }}×{{ BN }}) + (accumulate ? D : 0), {{ AB }} inputs.
// TRANS_B (16-bit inputs only): 1 for an N-major B, 0 for a K-major one (B stored as Bᵀ, N rows of K);
// TRANS_A likewise 1 for an M-major A (decode.cu.j2's swapped product reads a row-major B as A).
{% if DTYPE == "float32" %}
// Both operands K-major (rows of K contiguous); the tensor cores read the 32-bit patterns in shared
// memory as tf32, ignoring the 13 low mantissa bits (a tf32 tensor map has TMA round them away first).
// Accumulator register i of thread t of the warpgroup holds row 16*(t/32) + (t%32)/4 + 8*((i/2)%2),
// column 8*(i/4) + 2*(t%4) + i%2.
{% else %}
// A is K-major (rows of K contiguous); B is N-major (rows of N contiguous), hence the transpose bit
// (imm-trans-b = TRANS_B = 1), which 16-bit types allow; TRANS_B = 0 reads a K-major B. Accumulator
// register i of thread t of the warpgroup holds row 16*(t/32) + (t%32)/4 + 8*((i/2)%2), column
// 8*(i/4) + 2*(t%4) + i%2.
{% endif %}
{% macro wgmma_function(name, n) %}
template <int TRANS_B = 1, int TRANS_A = 0>
__device__ __forceinline__ void {{ name }}(float (&d)[{{ n // 2 }}], unsigned long long desc_a,
                                            unsigned long long desc_b, int accumulate) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %{{ n // 2 + 2 }}, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n{{ n }}k{{ WK }}.f32.{{ AB }}.{{ AB }}\n {"
{{ acc_registers(n // 2) | trim("\n") }}
{% if DTYPE == "float32" %}
        "},\n %{{ n // 2 }}, %{{ n // 2 + 1 }}, p, 1, 1;\n}\n"
{% else %}
        "},\n %{{ n // 2 }}, %{{ n // 2 + 1 }}, p, 1, 1, %{{ n // 2 + 4 }}, %{{ n // 2 + 3 }};\n}\n"
{% endif %}
{{ acc_constraints(n // 2) | trim("\n") }}
        : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TRANS_B), "n"(TRANS_A));
}
{% endmacro %}
{% if BN <= 256 %}
{{ wgmma_function("wgmma_async", BN) | trim("\n") }}
{% else %}
// BN > 256 is wider than one instruction (N <= 256): the caller issues wgmma_async_lo on columns 0..255 and
// wgmma_async_hi on the rest, B's descriptor advanced to column 256, into the two parts of one fragment
// (whose layout is the same as one instruction's over the whole width: columns in groups of 8)
{{ wgmma_function("wgmma_async_lo", 256) }}
{{ wgmma_function("wgmma_async_hi", BN - 256) }}
{% endif %}

// Epilogue for one thread's pair of adjacent columns of C (T_OUT): C = alpha * acc + beta * C, with C
// read only when beta != 0. The pair is one 4-byte (16-bit) or 8-byte (fp32) access: the API pads N and
// aligns ldc to 16 bytes, and the pair starts at an even column.
__device__ __forceinline__ void store_pair(T_OUT* p, float v0, float v1, float alpha, float beta) {
    v0 *= alpha;
    v1 *= alpha;
    if (beta != 0.f) {
        v0 = fmaf(beta, to_float(p[0]), v0);
        v1 = fmaf(beta, to_float(p[1]), v1);
    }
    if constexpr (sizeof(T_OUT) == 2) {
        T_OUT pair[2] = {from_float<T_OUT>(v0), from_float<T_OUT>(v1)};
        *reinterpret_cast<unsigned*>(p) = *reinterpret_cast<const unsigned*>(pair);
    } else {
        *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
    }
}
{% if UNALIGNED_C %}

// The pair where C may lie at any leading dimension and address (a rendering with_extras(unaligned_c=True)):
// store_pair's one access where both columns (col, col + 1) are inside N and p is aligned to the pair, else
// each column inside N alone (the caller has checked col < N). C is read only when beta != 0.
__device__ __forceinline__ void store_pair_any(T_OUT* p, int col, int N, float v0, float v1, float alpha,
                                               float beta) {
    if (col + 1 < N && reinterpret_cast<unsigned long long>(p) % (2 * sizeof(T_OUT)) == 0) {
        store_pair(p, v0, v1, alpha, beta);
        return;
    }
    store_c_at(p, v0, alpha, beta);
    if (col + 1 < N) store_c_at(p + 1, v1, alpha, beta);
}
{% endif %}

// The same pair into shared memory at byte address `addr` (the epilogue's staging buffer), converted to
// C's type: one st.shared of 4 or 8 bytes.
__device__ __forceinline__ void st_shared_pair(unsigned addr, float v0, float v1) {
    if constexpr (sizeof(T_OUT) == 2) {
        T_OUT pair[2] = {from_float<T_OUT>(v0), from_float<T_OUT>(v1)};
        asm volatile("st.shared.b32 [%0], %1;\n" :: "r"(addr), "r"(*reinterpret_cast<const unsigned*>(pair)) : "memory");
    } else {
        asm volatile("st.shared.v2.f32 [%0], { %1, %2 };\n" :: "r"(addr), "f"(v0), "f"(v1) : "memory");
    }
}
