// ---- unaligned operands: 16-byte chunks read wherever they lie ----------------------------------------
// For kernels whose operands may be aligned to the element only (K, N, leading dimensions and base
// addresses): a chunk of a row can straddle the matrix edge or a 16-byte boundary. A chunk moves as one
// vector load where it happens to be aligned and wholly inside the matrix, else in pieces (load_chunk says
// which), each guarded; elements past the edge read as zero. Needs common/vec.cuh.

__device__ __forceinline__ bool aligned_to(const void* p, int bytes) {
    return (reinterpret_cast<unsigned long long>(p) & (bytes - 1)) == 0;
}

// The 16 bytes of the 32 in lo:hi that start `off` bytes in (off < 16, a multiple of 2): word-wise moves
// selected by off's bits 8 and 4, then a funnel shift by its last 0 or 2 bytes (no dynamic register index).
__device__ __forceinline__ uint4 window16(uint4 lo, uint4 hi, unsigned off) {
    unsigned w0 = lo.x, w1 = lo.y, w2 = lo.z, w3 = lo.w, w4 = hi.x, w5 = hi.y, w6 = hi.z, w7 = hi.w;
    if (off & 8) { w0 = w2; w1 = w3; w2 = w4; w3 = w5; w4 = w6; w5 = w7; }
    if (off & 4) { w0 = w1; w1 = w2; w2 = w3; w3 = w4; w4 = w5; }
    const unsigned s = (off & 3) * 8;
    return make_uint4(__funnelshift_r(w0, w1, s), __funnelshift_r(w1, w2, s), __funnelshift_r(w2, w3, s),
                      __funnelshift_r(w3, w4, s));
}

// 16 bytes of consecutive elements from src, of which the first `valid` lie inside the matrix: those are
// read, the rest are zero bits (+0 in every element type here). valid <= 0 reads nothing. 32-bit elements
// off a 16-byte boundary are read one word each. 16-bit ones (7 of 8 rows of a matrix with an odd row
// length lie so) are read as the one or two aligned 16-byte blocks the chunk overlaps, shifted into place:
// two loads instead of eight (on an H200 up to 8% faster, 2% slower at worst, where the unaligned mma
// kernels take such rows; the same shifts made 32-bit chunks up to 1.6× slower than their four loads).
// Each block read holds a valid element, so it lies on that element's page; the bytes around the valid
// ones are shifted out or masked to zero.
template <typename T>
__device__ __forceinline__ uint4 load_chunk(const T* src, int valid) {
    static_assert(sizeof(T) == 2 || sizeof(T) == 4, "16- and 32-bit elements");
    constexpr int VEC = 16 / (int)sizeof(T);
    if (valid >= VEC && aligned_to(src, 16)) return __ldg(reinterpret_cast<const uint4*>(src));
    if constexpr (sizeof(T) == 4) {
        const unsigned* s = reinterpret_cast<const unsigned*>(src);
        return make_uint4(0 < valid ? __ldg(s) : 0u, 1 < valid ? __ldg(s + 1) : 0u, 2 < valid ? __ldg(s + 2) : 0u,
                          3 < valid ? __ldg(s + 3) : 0u);
    } else {
        if (valid <= 0) return make_uint4(0u, 0u, 0u, 0u);
        const unsigned off = (unsigned)(reinterpret_cast<unsigned long long>(src) & 15);
        const uint4* block = reinterpret_cast<const uint4*>(reinterpret_cast<const char*>(src) - off);
        const unsigned bytes = 2u * (unsigned)min(valid, VEC);  // the valid bytes, 2..16
        const uint4 lo = __ldg(block);
        const uint4 hi = off + bytes > 16 ? __ldg(block + 1) : make_uint4(0u, 0u, 0u, 0u);
        uint4 v = window16(lo, hi, off);
        if (bytes < 16) {  // zero the elements past the edge: word i keeps its first bytes - 4i bytes
            const auto keep = [bytes](unsigned word, int i) {
                const int left = (int)bytes - 4 * i;
                return left >= 4 ? word : left <= 0 ? 0u : word & 0xffffu;  // left is even: 2 keeps the low half
            };
            v = make_uint4(keep(v.x, 0), keep(v.y, 1), keep(v.z, 2), keep(v.w, 3));
        }
        return v;
    }
}

// load_chunk of four floats, as the fp32 kernels keep them
__device__ __forceinline__ float4 load_f32_chunk(const float* src, int valid) {
    const uint4 v = load_chunk(src, valid);
    return make_float4(__uint_as_float(v.x), __uint_as_float(v.y), __uint_as_float(v.z), __uint_as_float(v.w));
}
