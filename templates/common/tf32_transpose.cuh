// ---- row-major B for the tf32 wgmma: converter warps transpose each landed stage in shared memory ----
// wgmma reads 32-bit operands only K-major, and the copy engine does not transpose. TMA lands B as the
// caller keeps it: BN/32 boxes of [BK rows of k][32 n], in 128-byte rows whose 16-byte chunk index is
// XORed with row % 8. The converters rewrite it as the MMAs read it: BK/32 boxes of [BN rows of n][32 k],
// the same swizzle. A thread moves 4×4 blocks: four 16-byte loads (rows k), a transpose in registers,
// four 16-byte stores (rows n). In each 32×32 square the 8 threads p of a quarter-warp (one 16-byte access
// phase) of round d take n-chunk c = p and k-chunk q = (p + d) % 8: their load chunks c ^ (4q + i) % 8 and
// store chunks q ^ (4c + j) % 8 are 8 distinct bank groups, so neither side conflicts.
// A thread takes two blocks per round (THREADS_ apart), all eight loads issued before the first store:
// three warps must hide the shared-memory latency by themselves.
template <int BK, int BN, int THREADS_>
__device__ __forceinline__ void transpose_b_stage(unsigned src, unsigned dst, int thread) {
    constexpr int BLOCKS = (BK / 4) * (BN / 4), N_BOXES = BN / 32;
    for (int first = thread; first < BLOCKS; first += 2 * THREADS_) {
        unsigned x[2][4][4], to[2], q[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int b = first + h * THREADS_;
            if (b >= BLOCKS) break;
            const int square = b / 64, c = b % 8;
            q[h] = (c + b / 8) % 8;
            const int g = square % N_BOXES, kbox = square / N_BOXES;  // its n box (source) and k box (destination)
            const unsigned from = src + g * BK * 128 + (kbox * 32 + 4 * q[h]) * 128;
            to[h] = dst + kbox * BN * 128 + (g * 32 + 4 * c) * 128;
#pragma unroll
            for (int i = 0; i < 4; ++i)
                asm volatile("ld.shared.v4.b32 { %0, %1, %2, %3 }, [%4];\n"
                             : "=r"(x[h][i][0]), "=r"(x[h][i][1]), "=r"(x[h][i][2]), "=r"(x[h][i][3])
                             : "r"(from + i * 128 + ((c ^ ((4 * q[h] + i) & 7)) << 4)) : "memory");
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            if (first + h * THREADS_ >= BLOCKS) break;
            const int c = (first + h * THREADS_) % 8;
#pragma unroll
            for (int j = 0; j < 4; ++j)
                asm volatile("st.shared.v4.b32 [%0], { %1, %2, %3, %4 };\n"
                             :: "r"(to[h] + j * 128 + ((q[h] ^ ((4 * c + j) & 7)) << 4)),
                                "r"(x[h][0][j]), "r"(x[h][1][j]), "r"(x[h][2][j]), "r"(x[h][3][j]) : "memory");
        }
    }
}
