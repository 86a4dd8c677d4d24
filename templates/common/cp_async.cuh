// ---- cp.async (sm_80+): global -> shared copies that bypass registers ------------------------------
// A false predicate copies nothing and zero-fills the destination (src-size 0): edge tiles load zeros.

template <int BYTES>
__device__ __forceinline__ void cp_async(void* smem, const void* gmem, bool pred) {
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
    const int src_bytes = pred ? BYTES : 0;
    if constexpr (BYTES == 16) {  // .cg: cache in L2 only; tiles are reused from shared memory, not L1
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                     :: "r"(smem_addr(smem)), "l"(gmem), "r"(src_bytes));
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n"
                     :: "r"(smem_addr(smem)), "l"(gmem), "n"(BYTES), "r"(src_bytes));
    }
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

// One arrival on the mbarrier at `bar` (shared address) once every cp.async this thread has issued so far
// has landed; .noinc: that arrival is one of the count the barrier was initialised with.
__device__ __forceinline__ void cp_async_mbar_arrive(unsigned bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" :: "r"(bar) : "memory");
}
