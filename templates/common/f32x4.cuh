// ---- float4 loads for fp32 kernels, zero-filling outside the matrix ---------------------------------
// Four consecutive elements along a matrix's contiguous dimension (columns when row-major, rows when
// column-major). A family that uses these declares align = 4: the API then makes that dimension's
// extent, every leading dimension and every base pointer multiples of 4 floats, so a float4 lies
// wholly inside or wholly outside the matrix and one bounds test on its first element covers it.
__device__ __forceinline__ float4 load_f32x4(const float* p, bool pred) {
    return pred ? *reinterpret_cast<const float4*>(p) : make_float4(0.f, 0.f, 0.f, 0.f);
}
