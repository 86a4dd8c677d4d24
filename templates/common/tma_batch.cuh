// ---- TMA over a batch (needs common/batch.cuh and common/tma.cuh) ---------------------------------
// A batched operand's tensor map (cupy_gemm/tma.py, batched_layout) has rank 2 + MAX_BATCH_DIMS: the
// matrix's columns and rows, then BatchArgs' dimensions 2, 1, 0 (innermost first). Where the operand is
// broadcast its map has size 1 (a map's strides cannot be 0), so the member's coordinate there is 0.
struct BatchAt { int d[MAX_BATCH_DIMS]; };

// Member `index`'s coordinates in the map of the operand with batch strides `strides`.
__device__ __forceinline__ BatchAt batch_at(const BatchArgs& p, int index, const long long (&strides)[MAX_BATCH_DIMS]) {
    int coord[MAX_BATCH_DIMS];
    batch_coords(p, index, coord);
    BatchAt at;
#pragma unroll
    for (int d = 0; d < MAX_BATCH_DIMS; ++d) at.d[d] = strides[d] != 0 ? coord[d] : 0;
    return at;
}

// tma_load_2d and tma_store_2d in the matrix of the member at `at`: 5-D copies of a box one deep in the
// batch dimensions, so the shared-memory layout is the 2-D box's.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TensorMap* map, unsigned bar, int c0, int c1,
                                            const BatchAt& at) {
    asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, { %3, %4, %5, %6, %7 }], [%2];\n"
                 :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1),
                    "r"(at.d[2]), "r"(at.d[1]), "r"(at.d[0])
                 : "memory");
}

__device__ __forceinline__ void tma_store_2d(const TensorMap* map, unsigned src, int c0, int c1, const BatchAt& at) {
    asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group [%0, { %2, %3, %4, %5, %6 }], [%1];\n"
                 :: "l"(reinterpret_cast<unsigned long long>(map)), "r"(src), "r"(c0), "r"(c1),
                    "r"(at.d[2]), "r"(at.d[1]), "r"(at.d[0])
                 : "memory");
}
