// ---- TMA and mbarriers (sm_90): bulk tensor copies that complete on shared-memory barriers ----------
// A tensor map (CUtensorMap, 128 opaque bytes) is encoded on the host (cupy_gemm/tma.py) and passed by
// value as a `const __grid_constant__` kernel parameter, so its address is a constant-bank address the
// copy engine can read. The layout is the driver's; the kernel only takes its address.
struct __align__(64) TensorMap { unsigned long long opaque[16]; };
static_assert(sizeof(TensorMap) == 128, "a CUtensorMap is 128 bytes");

// One barrier = 8 bytes of shared memory; `count` arrivals complete a phase (plus any expected bytes).
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}

// Makes initialised barriers visible to the copy engine (the async proxy) before anyone uses them.
__device__ __forceinline__ void mbar_fence_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}

// Arrive and announce `bytes` of copies that will complete on this barrier in the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"(bytes) : "memory");
}

// Wait until the phase of parity `parity` has completed. A fresh barrier is in phase 0, so waiting for
// parity 1 returns at once: producers start on "empty" barriers that way. ACQUIRE_CLUSTER: afterwards the
// waiter also sees what other blocks of the cluster wrote before they arrived (the default: this block's).
template <bool ACQUIRE_CLUSTER = false>
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        if constexpr (ACQUIRE_CLUSTER)
            asm volatile("{\n .reg .pred p;\n"
                         " mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                         " selp.u32 %0, 1, 0, p;\n}\n"
                         : "=r"(done) : "r"(bar), "r"(parity) : "memory");
        else
            asm volatile("{\n .reg .pred p;\n"
                         " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                         " selp.u32 %0, 1, 0, p;\n}\n"
                         : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

// Bring the tensor map into the constant cache before the first copy needs it.
__device__ __forceinline__ void tma_prefetch_map(const TensorMap* map) {
    asm volatile("prefetch.tensormap [%0];\n" :: "l"(reinterpret_cast<unsigned long long>(map)) : "memory");
}

// Copy the box at element coordinates (c0 innermost, c1) of a 2-D tensor into shared memory at `dst`,
// counting its bytes on `bar`. Box elements outside the tensor arrive as zeros: edge tiles need no
// predication, and the byte count is always the whole box.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TensorMap* map, unsigned bar, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, { %3, %4 }], [%2];\n"
                 :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1)
                 : "memory");
}

// The same for a 3-D tensor (c2 outermost): a stack of matrices, one per c2, whose boxes zero-fill at
// each matrix's own edge instead of reading into the next one.
__device__ __forceinline__ void tma_load_3d(unsigned dst, const TensorMap* map, unsigned bar, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, { %3, %4, %5 }], [%2];\n"
                 :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
}

// ---- TMA stores: shared memory -> global, clipped at the tensor's edge ----------------------------
// Ordinary stores to shared memory become visible to the copy engine only after this fence.
__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// A thread that read a stage with ordinary loads (ldmatrix, ld.shared), before it hands the stage back to
// the producer: the copy engine's next write into it is ordered after those reads only by this fence (the
// barrier orders the generic proxy alone). Without it the 8-block decode clusters' sums went wrong in about
// one launch in 400 on the H100: a later copy overwrote part of a stage before it was read.
__device__ __forceinline__ void fence_stage_reads() {
    fence_proxy_async_smem();
}

// A warp hands back a stage that its threads read with ordinary loads: each fences its reads, then its
// first lane arrives on the stage's empty barrier (an arrival count of one per warp).
__device__ __forceinline__ void release_read_stage(unsigned empty_bar, int lane) {
    fence_stage_reads();
    __syncwarp();
    if (lane == 0) mbar_arrive(empty_bar);
}

// Store the box at `src` to element coordinates (c0 innermost, c1); elements outside the tensor are
// dropped, so edge tiles need no guards.
__device__ __forceinline__ void tma_store_2d(const TensorMap* map, unsigned src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, { %2, %3 }], [%1];\n"
                 :: "l"(reinterpret_cast<unsigned long long>(map)), "r"(src), "r"(c0), "r"(c1) : "memory");
}

__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// Wait until at most N committed store groups of this thread are still reading shared memory.
template <int N>
__device__ __forceinline__ void tma_store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(N) : "memory");
}

// Barrier among `count` threads (a multiple of 32) on hardware barrier `id` (0 is __syncthreads').
__device__ __forceinline__ void named_barrier_sync(unsigned id, unsigned count) {
    asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(count) : "memory");
}
// arrive on a named barrier without waiting (the other side's bar.sync completes it)
__device__ __forceinline__ void named_barrier_arrive(unsigned id, unsigned count) {
    asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(count) : "memory");
}
