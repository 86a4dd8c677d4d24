// ---- vector types: 4-, 8- and 16-byte moves -------------------------------------------------------
// A vector access needs its address aligned to its size; the API guarantees that for the leading
// dimensions and base pointers a family declares in `align` (padding the operands otherwise).
template <int BYTES> struct VecOf;
template <> struct VecOf<2> { using type = unsigned short; };
template <> struct VecOf<4> { using type = unsigned int; };
template <> struct VecOf<8> { using type = uint2; };
template <> struct VecOf<16> { using type = uint4; };
// 8 fp32 elements of a C converted from 16-bit inputs (one 16-byte chunk of them): two 16-byte moves
template <> struct VecOf<32> { struct alignas(16) type { uint4 lo, hi; }; };

// Copy VEC consecutive elements of type T as one access.
template <typename T, int VEC>
__device__ __forceinline__ void copy_vec(T* dst, const T* src) {
    using V = typename VecOf<sizeof(T) * VEC>::type;
    *reinterpret_cast<V*>(dst) = *reinterpret_cast<const V*>(src);
}

template <typename T, int VEC>
__device__ __forceinline__ void zero_vec(T* dst) {
    using V = typename VecOf<sizeof(T) * VEC>::type;
    *reinterpret_cast<V*>(dst) = V{};
}
