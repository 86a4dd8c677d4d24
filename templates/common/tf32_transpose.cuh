// ---- row-major B for the tf32 wgmma: converter warps transpose each landed stage in shared memory ----
// wgmma reads 32-bit operands only K-major, and the copy engine does not transpose. TMA lands B as the
// caller keeps it: BN/32 boxes of [BK rows of k][32 n], in 128-byte rows whose 16-byte chunk index is
// XORed with row % 8. The converters rewrite it as the MMAs read it: BK/32 boxes of [BN rows of n][32 k],
// the same swizzle. A thread moves one 4×4 block at a time: four 16-byte loads (rows k), a transpose in
// registers, four 16-byte stores (rows n). In each 32×32 square the 8 threads of a quarter-warp (one
// 16-byte access phase) take n-chunk c = p and k-chunk q = (p + d) % 8: their load chunks c ^ (4q + i) % 8
// and store chunks q ^ (4c + j) % 8 are 8 distinct bank groups, so neither side conflicts.
template <int BK, int BN, int THREADS_>
__device__ __forceinline__ void transpose_b_stage(unsigned src, unsigned dst, int thread) {
    constexpr int BLOCKS = (BK / 4) * (BN / 4), N_BOXES = BN / 32;
    for (int b = thread; b < BLOCKS; b += THREADS_) {
        const int square = b / 64, c = b % 8, q = (c + b / 8) % 8;
        const int g = square % N_BOXES, h = square / N_BOXES;  // its n box (source) and k box (destination)
        const unsigned from = src + g * BK * 128 + (h * 32 + 4 * q) * 128;
        const unsigned to = dst + h * BN * 128 + (g * 32 + 4 * c) * 128;
        unsigned x[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
            asm volatile("ld.shared.v4.b32 { %0, %1, %2, %3 }, [%4];\n"
                         : "=r"(x[i][0]), "=r"(x[i][1]), "=r"(x[i][2]), "=r"(x[i][3])
                         : "r"(from + i * 128 + ((c ^ ((4 * q + i) & 7)) << 4)) : "memory");
#pragma unroll
        for (int j = 0; j < 4; ++j)
            asm volatile("st.shared.v4.b32 [%0], { %1, %2, %3, %4 };\n"
                         :: "r"(to + j * 128 + ((q ^ ((4 * c + j) & 7)) << 4)),
                            "r"(x[0][j]), "r"(x[1][j]), "r"(x[2][j]), "r"(x[3][j]) : "memory");
    }
}
