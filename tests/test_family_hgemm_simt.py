"""CPU tests of the hgemm_simt family (fp16 GEMM on CUDA cores).

Constraints, catalogue, GPU-free compilation with a clean ptxas report, the template's static_asserts
mirroring the Python rules, and a CPU emulation of rendered kernels: each block's threads run as
cooperative fibers that meet at __syncthreads, on ragged shapes with exact small-integer data,
NaN-filled shared memory, operands that end at a guard page, alignment-checked vector accesses and
cp.async copies that land only at cp_async_wait. The emulation needs g++ with _Float16 (GCC 12+).
"""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from cupy_gemm.errors import ConfigError
from cupy_gemm.registry import catalogue, data_dir, family, make_variant
from cupy_gemm.render import render

FAMILY = "hgemm_simt"
VARIANTS = [name for name, v in catalogue().items() if v.family.name == FAMILY]

SEED_NAMES = [
    "hgemm_t_8x8_sliced_k_f16x4", "hgemm_t_8x8_sliced_k_f16x4_pack", "hgemm_t_8x8_sliced_k_f16x4_bcf",
    "hgemm_t_8x8_sliced_k_f16x4_pack_bcf", "hgemm_t_8x8_sliced_k_f16x4_bcf_offset",
    "hgemm_t_8x8_sliced_k_f16x4_pack_bcf_offset", "hgemm_t_4x4_sliced_k_f16x4_pack_bcf",
    "hgemm_t_4x4_sliced_k_f16x4_pack_bcf_offset", "hgemm_t_8x8_sliced_k_f16x8_pack_bcf",
    "hgemm_t_8x8_sliced_k_f16x8_pack_bcf_offset", "hgemm_t_8x8_sliced_k_f16x8_pack_bcf_dbuf",
    "hgemm_t_8x8_sliced_k16_f16x8_pack_bcf_dbuf", "hgemm_t_8x8_sliced_k32_f16x8_pack_bcf_dbuf",
    "hgemm_t_8x8_sliced_k16_f16x8_pack_bcf_dbuf_async", "hgemm_t_8x8_sliced_k32_f16x8_pack_bcf_dbuf_async",
    "hgemm_t_16x8_sliced_k16_f16x8_pack_bcf_dbuf", "hgemm_t_16x8_sliced_k32_f16x8_pack_bcf_dbuf",
    "hgemm_t_16x8_sliced_k16_f16x8_pack_bcf_dbuf_async", "hgemm_t_16x8_sliced_k32_f16x8_pack_bcf_dbuf_async",
]


def test_seed_names_in_catalogue_with_their_accumulation():
    cat = catalogue()
    for name in SEED_NAMES:
        assert cat[name].family.name == FAMILY
        assert cat[name].acc == "float16", f"{name}: the seed accumulates in half"
    acc32 = [n for n in VARIANTS if n.endswith("_acc32")]
    assert acc32 and all(cat[n].acc == "float32" for n in acc32)
    assert all(cat[n].notes for n in VARIANTS)


def _make(acc="float16", **params):
    return make_variant(family(FAMILY), "probe", "float16", params, acc)


@pytest.mark.parametrize("params, acc, param, words", [
    (dict(BM=136, TM=16), "float16", "BM", "BM must be a multiple of TM"),
    (dict(BN=136, TN=16), "float16", "BN", "BN must be a multiple of TN"),
    (dict(BM=12, TM=2, BK=8), "float16", "BM", "BM must be a multiple of 8"),
    (dict(BN=12, TN=2, BM=64, TM=4, BK=8, VEC=4), "float16", "BN", "BN must be a multiple of 8"),
    (dict(PAD=4), "float16", "PAD", "PAD must be a multiple of 8"),
    (dict(BK=12, VEC=8), "float16", "BK", "BK must be a multiple of VEC"),
    (dict(BN=120, TN=8, BM=64, VEC=16), "float16", "VEC", "one of [4, 8]"),
    (dict(PACK=1), "float32", "PACK", "PACK=1 needs fp16 accumulation"),
    (dict(ASYNC=1, DBUF=0), "float16", "ASYNC", "ASYNC=1 needs DBUF=1"),
    (dict(TM=16, TN=16, BM=256, BN=128, PACK=0), "float32", "TN", "TM*TN must be at most 128"),
    (dict(TM=3), "float16", "TM", "one of [2, 4, 8, 16]"),
])
def test_constraints_name_the_parameter(params, acc, param, words):
    with pytest.raises(ConfigError, match=re.escape(words)) as err:
        _make(acc, **params)
    assert err.value.param == param


def test_rules_are_mirrored_by_static_asserts():
    """Every rule's sentence appears in the template's static_asserts, word for word."""
    template = (data_dir("templates") / "hgemm_simt.cu.j2").read_text()
    asserted = " ".join(re.findall(r'static_assert\([^;]*?"([^"]+)"', template, flags=re.S))
    for sentence in ["BM must be a multiple of TM", "BN must be a multiple of TN", "BM must be a multiple of 8",
                     "BN must be a multiple of 8", "PAD must be a multiple of 8", "BK must be a multiple of VEC",
                     "PACK=1 needs fp16 accumulation", "ASYNC=1 needs DBUF=1",
                     "TM*TN must be at most 128 with fp32 and 256 with fp16 accumulation"]:
        assert sentence in asserted, sentence


def test_launch_shape_alignment_and_arch():
    v = catalogue()["hgemm_t_16x8_sliced_k32_f16x8_pack_bcf_dbuf_async"]
    fam = v.family
    assert fam.threads(v.params) == 128 and fam.tile(v.params) == (128, 128)
    assert fam.align(v.params, v.dtype) == 8
    assert fam.min_cc(v.params, v.dtype, v.acc) == 80
    assert fam.smem_bytes(v.params, v.dtype, v.acc) == 2 * 2 * 32 * 128 * 2
    plain = catalogue()["hgemm_t_8x8_sliced_k_f16x4"]
    assert fam.align(plain.params, plain.dtype) == 4 and fam.min_cc(plain.params, plain.dtype, plain.acc) == 70
    # fp32 accumulation keeps what passes through registers as float in shared memory
    wide = catalogue()["hgemm_t_8x8_sliced_k16_f16x8_bcf_dbuf_acc32"]
    assert fam.smem_bytes(wide.params, wide.dtype, wide.acc) == 2 * 2 * 16 * 128 * 4


def test_render_is_plain_cuda():
    src = render(catalogue()["hgemm_t_8x8_sliced_k16_f16x8_pack_bcf_dbuf"])
    assert "{{" not in src and "{%" not in src
    assert src.count('extern "C" __global__') == 1
    assert "constexpr int BM = 128, BN = 128, BK = 16, TM = 8, TN = 8;" in src


# ---- CPU emulation -------------------------------------------------------------------------------
_SHIM = r"""
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ucontext.h>
#include <vector>
#include <sys/mman.h>
#include <unistd.h>
using std::max;
using std::min;
#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __shared__
struct dim3_ { unsigned x, y, z; };
static dim3_ threadIdx, blockIdx;
struct half { _Float16 v; };
struct alignas(4) half2 { half x, y; };
struct __nv_bfloat16 { uint16_t bits; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
static inline half mk(double d) { half h; h.v = (_Float16)d; return h; }
static inline float __half2float(half h) { return (float)h.v; }
static inline half __float2half_rn(float f) { return mk(f); }
static inline half __float2half(float f) { return mk(f); }
static inline half2 __float2half2_rn(float f) { return half2{mk(f), mk(f)}; }
static inline half2 __half2half2(half h) { return half2{h, h}; }
static inline half __low2half(half2 h) { return h.x; }
static inline half __high2half(half2 h) { return h.y; }
static inline half __hfma(half a, half b, half c) { return mk((double)a.v * (double)b.v + (double)c.v); }
static inline half2 __hfma2(half2 a, half2 b, half2 c) { return half2{__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)}; }
static inline float __bfloat162float(__nv_bfloat16 b) { uint32_t u = (uint32_t)b.bits << 16; float f; memcpy(&f, &u, 4); return f; }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { uint32_t u; memcpy(&u, &f, 4); return __nv_bfloat16{(uint16_t)(u >> 16)}; }
static inline size_t __cvta_generic_to_shared(const void* p) { return (size_t)p; }  // smem_addr: no state spaces here
static void check_aligned(const void* p, size_t n) { if ((uintptr_t)p % n) { fprintf(stderr, "misaligned %zu-byte access\n", n); abort(); } }
void emu_syncthreads();
#define __syncthreads() emu_syncthreads()
struct Copy { void* dst; const void* src; int bytes; bool pred; };
struct Groups { std::vector<std::vector<Copy>> closed; std::vector<Copy> open; };
Groups& emu_groups();
"""

_CP_ASYNC = r"""
template <int BYTES> inline void cp_async(void* smem, const void* gmem, bool pred) {
    check_aligned(smem, BYTES); if (pred) check_aligned(gmem, BYTES);
    emu_groups().open.push_back({smem, gmem, BYTES, pred});
}
inline void cp_async_commit() { auto& g = emu_groups(); g.closed.push_back(g.open); g.open.clear(); }
template <int N> inline void cp_async_wait() {  // copies land here, not at issue
    auto& g = emu_groups();
    while ((int)g.closed.size() > N) {
        for (auto& c : g.closed.front()) { if (c.pred) memcpy(c.dst, c.src, c.bytes); else memset(c.dst, 0, c.bytes); }
        g.closed.erase(g.closed.begin());
    }
}
"""

_MAIN = r"""
__attribute__((aligned(128))) unsigned char smem[1 << 18];
struct Fiber { ucontext_t ctx; std::vector<char> stack; int state; Groups groups; };  // state: 0 run, 1 barrier, 2 done
static std::vector<Fiber> fibers;
static ucontext_t scheduler;
static int current;
Groups& emu_groups() { return fibers[current].groups; }
void emu_syncthreads() { fibers[current].state = 1; swapcontext(&fibers[current].ctx, &scheduler); }
static const half *gA, *gB; static half* gC; static int gM, gN, gK; static long long glda, gldb, gldc; static float galpha, gbeta;
static void body() { gemm_kernel(gA, gB, gC, gM, gN, gK, glda, gldb, gldc, galpha, gbeta); fibers[current].state = 2; }
template <typename T> T* ending_at_guard_page(size_t n) {
    size_t page = sysconf(_SC_PAGESIZE), bytes = n * sizeof(T), span = (bytes + page - 1) / page * page;
    char* base = (char*)mmap(nullptr, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    mprotect(base + span, page, PROT_NONE);
    return (T*)(base + span - bytes);
}
int main(int argc, char** argv) {
    gM = atoi(argv[1]); gN = atoi(argv[2]); gK = atoi(argv[3]); glda = atoll(argv[4]); gldb = atoll(argv[5]);
    gldc = atoll(argv[6]); galpha = atof(argv[7]); gbeta = atof(argv[8]); srand(atoi(argv[9]));
    size_t na = (size_t)(gM - 1) * glda + gK, nb = (size_t)(gK - 1) * gldb + gN, nc = (size_t)(gM - 1) * gldc + gN;
    half* A = ending_at_guard_page<half>(na); half* B = ending_at_guard_page<half>(nb); half* C = ending_at_guard_page<half>(nc);
    for (size_t i = 0; i < na; ++i) A[i] = mk(rand() % 3 - 1);  // small integers: exact in fp16 sums
    for (size_t i = 0; i < nb; ++i) B[i] = mk(rand() % 3 - 1);
    std::vector<half> C0(nc);
    for (size_t i = 0; i < nc; ++i) C0[i] = C[i] = gbeta != 0.f ? mk(rand() % 5 - 2) : mk(NAN);
    gA = A; gB = B; gC = C;
    const int blocks = ((gM + TILE_M - 1) / TILE_M) * ((gN + TILE_N - 1) / TILE_N);
    fibers.resize(THREADS);
    for (auto& f : fibers) f.stack.resize(1 << 16);
    for (int b = 0; b < blocks; ++b) {
        blockIdx = {(unsigned)b, 0, 0};
        memset(smem, 0xff, sizeof smem);  // NaN: reading unwritten shared memory poisons C
        for (auto& f : fibers) {
            getcontext(&f.ctx);
            f.ctx.uc_stack.ss_sp = f.stack.data(); f.ctx.uc_stack.ss_size = f.stack.size(); f.ctx.uc_link = &scheduler;
            makecontext(&f.ctx, body, 0);
            f.state = 0; f.groups = Groups();
        }
        for (;;) {
            for (int t = 0; t < THREADS; ++t) {
                if (fibers[t].state) continue;
                current = t; threadIdx = {(unsigned)t, 0, 0};
                swapcontext(&scheduler, &fibers[t].ctx);
            }
            int done = 0;
            for (auto& f : fibers) done += f.state == 2;
            if (done == THREADS) break;
            if (done) { fprintf(stderr, "block %d: threads exited while others wait at a barrier\n", b); return 3; }
            for (auto& f : fibers) f.state = 0;
        }
    }
    long bad = 0;
    for (int i = 0; i < gM; ++i) {
        for (int j = 0; j < gN; ++j) {
            double ref = 0;
            for (int k = 0; k < gK; ++k) ref += (double)A[(size_t)i * glda + k].v * (double)B[(size_t)k * gldb + j].v;
            ref = galpha * ref + (gbeta != 0.f ? (double)gbeta * (double)C0[(size_t)i * gldc + j].v : 0.0);
            const double got = (double)C[(size_t)i * gldc + j].v;
            if (!(got == ref) && bad++ < 3) fprintf(stderr, "C[%d][%d] = %g, expected %g\n", i, j, got, ref);
        }
        for (long long j = gN; j < gldc && (size_t)i * gldc + j < nc; ++j)  // the padding columns stay untouched
            if (memcmp(&C[(size_t)i * gldc + j], &C0[(size_t)i * gldc + j], sizeof(half)) && bad++ < 3)
                fprintf(stderr, "C[%d][%lld] beyond N was written\n", i, j);
    }
    if (bad) fprintf(stderr, "%ld wrong elements\n", bad);
    return bad ? 1 : 0;
}
"""


def _emulator_source(variant) -> str:
    src = render(variant)
    cp_async = (data_dir("templates") / "common" / "cp_async.cuh").read_text()
    assert cp_async in src
    src = src.replace(cp_async, _CP_ASYNC)
    src = src.replace("#include <cuda_fp16.h>", "").replace("#include <cuda_bf16.h>", "")
    # every vector access must be aligned to its size, as on the GPU
    src = src.replace("*reinterpret_cast<V*>(dst) =", "check_aligned(dst, sizeof(V)); *reinterpret_cast<V*>(dst) =")
    src = src.replace("*reinterpret_cast<const V*>(src);", "(check_aligned(src, sizeof(V)), *reinterpret_cast<const V*>(src));")
    tile_m, tile_n = variant.family.tile(variant.params)
    return f"{_SHIM}\n{src}\n#define TILE_M {tile_m}\n#define TILE_N {tile_n}\n{_MAIN}"


def _shapes(align: int):
    up = lambda x: -(-x // align) * align  # noqa: E731 - the API pads K and N to `align`
    tight = [(1, 1, 1), (17, 17, 17), (127, 129, 37), (200, 8, 300), (5, 300, 9), (130, 250, 64)]
    shapes = [(m, up(n), up(k), up(k), up(n), up(n), 1.0, 0.0) for m, n, k in tight]
    # leading dimensions wider than the matrices, alpha and beta (C read back)
    shapes.append((33, up(70), up(20), up(20) + align, up(70) + 2 * align, up(70) + 3 * align, 0.5, 2.0))
    return shapes


_EMULATED = [
    "hgemm_t_8x8_sliced_k_f16x4",                          # row-major A, one buffer, scalar half FMAs
    "hgemm_t_4x4_sliced_k_f16x4_pack_bcf_offset",          # half the threads load, padded rows
    "hgemm_t_8x8_sliced_k16_f16x8_pack_bcf_dbuf",          # swizzled transposed A, double buffer
    "hgemm_t_16x8_sliced_k32_f16x8_pack_bcf_dbuf_async",   # cp.async, several loads per thread
    "hgemm_t_8x8_sliced_k16_f16x8_bcf_dbuf_acc32",         # float shared memory, B read in pieces
    "hgemm_t_8x8_sliced_k16_f16x8_bcf_dbuf_async_acc32",   # half B widened after the shared read
    ("float16", dict(BM=64, BN=64, BK=32, TM=4, TN=8, VEC=8, ASYNC=1, A_TRANSPOSED=0, PAD=8, BLOCK_SWIZZLE=128)),
]


@pytest.fixture(scope="module")
def gxx():
    exe = shutil.which("g++")
    if exe is None:
        pytest.skip("g++ not found: the CPU emulation needs it")
    return exe


@pytest.mark.parametrize("which", _EMULATED, ids=lambda w: w if isinstance(w, str) else "async_row_major_a")
def test_emulated_kernel_is_exact_on_ragged_shapes(which, gxx, tmp_path):
    variant = catalogue()[which] if isinstance(which, str) else _make(which[0], **which[1])
    source, exe = tmp_path / "kernel.cpp", tmp_path / "kernel"
    source.write_text(_emulator_source(variant))
    build = subprocess.run([gxx, "-std=c++20", "-O1", "-fno-strict-aliasing", "-w", "-o", str(exe), str(source)],
                           capture_output=True, text=True)
    if build.returncode and "_Float16" in build.stderr:
        pytest.skip("this g++ has no _Float16")
    assert build.returncode == 0, build.stderr[-3000:]
    for shape in _shapes(variant.family.align(variant.params, variant.dtype)):
        run = subprocess.run([str(exe), *map(str, shape), "7"], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, f"{variant.name} M,N,K,lda,ldb,ldc,alpha,beta={shape}: " \
                                    f"exit {run.returncode}\n{run.stderr[-2000:]}"
