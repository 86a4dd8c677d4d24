// ---- batches: one launch for many products of one shape (cupy_gemm/batching.py plans them) --------
// Member `index` of the batch unravels over `shape` (outermost first; unused dimensions have size 1) and
// each operand steps by its own element strides, 0 where it is broadcast (a weight shared by the batch is
// read in place). cupy_gemm/launch.py packs this struct byte for byte (BATCH_ARGS_DTYPE).
constexpr int MAX_BATCH_DIMS = 3;
struct BatchArgs {
    int count;                    // members: the product of shape
    int shape[MAX_BATCH_DIMS];
    long long a[MAX_BATCH_DIMS];  // element strides of A, B and C per batch dimension
    long long b[MAX_BATCH_DIMS];
    long long c[MAX_BATCH_DIMS];
};

// The member's index along each batch dimension (what a TMA family passes as map coordinates).
__device__ __forceinline__ void batch_coords(const BatchArgs& p, int index, int (&coord)[MAX_BATCH_DIMS]) {
#pragma unroll
    for (int d = MAX_BATCH_DIMS - 1; d >= 0; --d) {
        coord[d] = index % p.shape[d];
        index /= p.shape[d];
    }
}

// Element offsets of member `index` in A, B and C (what a pointer family adds to its base pointers).
__device__ __forceinline__ void batch_offsets(const BatchArgs& p, int index, long long& a, long long& b,
                                              long long& c) {
    int coord[MAX_BATCH_DIMS];
    batch_coords(p, index, coord);
    a = b = c = 0;
#pragma unroll
    for (int d = 0; d < MAX_BATCH_DIMS; ++d) {
        a += coord[d] * p.a[d];
        b += coord[d] * p.b[d];
        c += coord[d] * p.c[d];
    }
}

// Runs member(index, a, b, c) for the members a block of a pointer family serves: blockIdx.z, then every
// gridDim.z-th after it (a batch larger than the grid's 65535 z), with their element offsets in A, B, C.
// The barrier keeps the next member's tile loads off shared memory the previous one still reads.
template <typename Member>
__device__ __forceinline__ void for_each_member(const BatchArgs& p, Member member) {
    for (int index = blockIdx.z; index < p.count; index += gridDim.z) {
        if (index != (int)blockIdx.z) __syncthreads();
        long long a, b, c;
        batch_offsets(p, index, a, b, c);
        member(index, a, b, c);
    }
}
static_assert(sizeof(BatchArgs) == 88, "BatchArgs as cupy_gemm/batching.py packs it");
