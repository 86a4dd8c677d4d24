// ---- XOR swizzle of 16-byte chunks within shared-memory rows --------------------------------------
// Shared memory serves a 16-byte-per-thread access (ldmatrix row, cp.async, ld.shared.v4) eight
// threads at a time, from the 128 bytes that the 32 banks cover. A tile whose rows are a multiple of
// 128 bytes puts the same chunk of eight consecutive rows in one bank group: an 8-way conflict.
// Storing chunk c of a row at chunk c ^ f(row) spreads those eight rows over all eight groups with
// no padding. Rows of CHUNKS < 8 chunks share a 128-byte line with 8/CHUNKS - 1 neighbours; there
// the rows of one line keep their chunk and consecutive lines are permuted, to the same effect.
// The permutation depends on row % 8 only, so any row congruent mod 8 gives the same answer.
template <int CHUNKS>  // 16-byte chunks per row: a power of two, at least 2
__device__ __forceinline__ int swizzle_chunk(int row, int chunk) {
    static_assert(CHUNKS >= 2 && (CHUNKS & (CHUNKS - 1)) == 0,
                  "a swizzled row must be a power-of-two number of 16-byte chunks, at least 2");
    if constexpr (CHUNKS >= 8) {
        // (r & 3) * 2 + (r >> 2): a bijection of 0..7 that also gives rows r and r+1..r+3 (r % 4 == 0)
        // disjoint chunk pairs {c, c ^ 1}, which 4-byte loads of four rows x eight columns need.
        const int r = row & 7;
        return chunk ^ (((r & 3) << 1) | (r >> 2));
    } else {
        constexpr int ROWS_PER_LINE = 8 / CHUNKS;
        return chunk ^ ((row / ROWS_PER_LINE) & (CHUNKS - 1));
    }
}
