"""The variants that read unaligned operands in place (UNALIGNED = 1): the catalogue's, and one parameter set
per template path the catalogue's do not take, shared by tests/test_unaligned.py (they validate and compile)
and tests/gpu/test_unaligned_gpu.py (they compute right)."""
from cupy_gemm import registry

CATALOGUE = sorted(n for n, v in registry.catalogue().items() if v.params.get("UNALIGNED"))

_MMA = dict(WARPS_M=2, WARPS_N=2, WARP_TILE_M=2, WARP_TILE_N=4, UNALIGNED=1)
_SIMT = dict(BM=64, BN=64, BK=16, TM=8, TN=4, PAD=4, MIN_BLOCKS=4, UNALIGNED=1)
_SKINNY = dict(BN=128, VEC=8, WARPS=4, KU=4, BK=128, UNALIGNED=1)
_KMAJOR = dict(BN=8, NT=2, VEC=8, WARPS=8, KU=4, BK=512, UNALIGNED=1)
# name -> (family, dtype, acc, parameters)
_PATHS = {
    "mma_f16_stages1": ("mma", "float16", "float32", dict(_MMA, BK=32, STAGES=1)),
    "mma_f16_stages2_swizzle": ("mma", "float16", "float32", dict(_MMA, BK=32, STAGES=2, A_PAD=0, B_PAD=0,
                                                                 SMEM_SWIZZLE=1)),
    "mma_f16_half_acc_stages4_x2": ("mma", "float16", "float16", dict(_MMA, BK=16, STAGES=4, B_X4=0)),
    "mma_tf32_swizzle_stages2": ("mma", "float32", "tf32", dict(_MMA, BK=32, STAGES=2, A_PAD=0, B_PAD=0,
                                                               SMEM_SWIZZLE=1, RBUF=1)),
    # 48 rows of A, 32 per pass of the loader: the second pass is half outside the tile
    "mma_bf16_partial_pass": ("mma", "bfloat16", "float32", dict(_MMA, WARPS_M=1, WARPS_N=4, WARP_TILE_M=3,
                                                                 WARP_TILE_N=2, BK=32, STAGES=3)),
    "simt_async_bcf": ("sgemm_simt", "float32", "float32", dict(_SIMT, A_TRANSPOSED=1, DBUF=1, ASYNC=1)),
    "simt_async_rowmajor_a": ("sgemm_simt", "float32", "float32", dict(_SIMT, A_TRANSPOSED=0, DBUF=1, ASYNC=1)),
    "simt_single_buffer": ("sgemm_simt", "float32", "float32", dict(_SIMT, A_TRANSPOSED=0, DBUF=0, PAIRS=0)),
    "simt_split3": ("sgemm_simt", "float32", "float32", dict(_SIMT, A_TRANSPOSED=1, DBUF=1, SPLIT_K=3)),
    # the few-rows kernels (max_rows): B row-major on tensor cores (8 and 16 rows; K split in three), on CUDA
    # cores (16- and 32-bit), and B column-major both ways
    "skinny_f16_mma_r8": ("skinny", "float16", "float32", dict(_SKINNY, ROWS=8, KU=2, MMA=1)),
    "skinny_bf16_mma_r16_split3": ("skinny", "bfloat16", "float32", dict(_SKINNY, ROWS=16, BN=64, BK=64, MMA=1,
                                                                         SPLIT_K=3)),
    "skinny_f16_r4": ("skinny", "float16", "float32", dict(_SKINNY, ROWS=4, BN=64, KU=8, BK=256)),
    "skinny_f32_r16": ("skinny", "float32", "float32", dict(_SKINNY, ROWS=16, VEC=4, WARPS=8)),
    "skinny_kmajor_f16_mma_r16": ("skinny_kmajor", "float16", "float32", dict(_KMAJOR, ROWS=16, BN=16, NT=16,
                                                                              KU=2, MMA=1)),
    "skinny_kmajor_bf16_r1": ("skinny_kmajor", "bfloat16", "float32", dict(_KMAJOR, ROWS=1)),
    "skinny_kmajor_f32_r2": ("skinny_kmajor", "float32", "float32", dict(_KMAJOR, ROWS=2, VEC=4)),
}


def path_variants() -> dict:
    """{name: Variant} of the template paths beyond the catalogue's entries."""
    return {name: registry.make_variant(registry.family(fam), f"unaligned_{name}", dtype, params, acc)
            for name, (fam, dtype, acc, params) in _PATHS.items()}
