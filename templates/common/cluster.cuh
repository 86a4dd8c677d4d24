// ---- thread-block clusters (sm_90): CTAs that share B stages through TMA multicast ----------------
// A cluster of CLUSTER CTAs runs on one GPC, and each CTA can reach the others' shared memory. Here
// the CTAs of a cluster compute vertically adjacent C tiles, which read the same B tile: each loads a
// share of every B stage and multicasts it into the same offset of all of them, so L2 serves B once per
// cluster instead of once per CTA. The price is a cluster-wide "empty" barrier: a stage may be refilled
// only when the consumers of every CTA are done with it, since any CTA's copy lands in all of them.
__device__ __forceinline__ unsigned cluster_ctarank() {
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    return rank;
}

// Every thread of every CTA of the cluster: barrier, with this CTA's shared-memory writes (barrier
// initialisation included) visible to the others after it. A CTA must not exit while another may still
// write into its shared memory or arrive on its barriers: the kernel ends with one too. The barrier is
// .aligned (every lane of a warp executes it together), so the warp reconverges first: a producer warp's
// lane 0 comes from its copy loop after the other lanes.
__device__ __forceinline__ void cluster_sync() {
    __syncwarp();
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// Arrive on the barrier at `bar` (a shared::cta address) in the shared memory of CTA `rank` of the cluster.
// The default (.release.cta) semantics suffice: what the arrival announces is that this CTA's wgmma are
// done reading a stage, which wgmma_wait already ordered. An explicit .release.cluster made 128×256
// tiles more than twice as slow on the H100 (docs/NOTES-hopper.md).
__device__ __forceinline__ void mbar_arrive_cluster(unsigned bar, unsigned rank) {
    asm volatile("{\n .reg .b32 remote;\n"
                 " mapa.shared::cluster.u32 remote, %0, %1;\n"
                 " mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n"
                 :: "r"(bar), "r"(rank) : "memory");
}

// Where a block of a persistent grid of CLUSTER-block clusters stands (CLUSTER = 1: blocks alone): its
// rank in its cluster, which cluster it is, how many there are. Joining synchronises the cluster (the
// block when alone), so barriers initialised before it are ready for every peer's copies and arrivals.
struct ClusterPlace { int rank, index, count; };

template <int CLUSTER>
__device__ __forceinline__ ClusterPlace join_cluster() {
    if constexpr (CLUSTER > 1) {
        cluster_sync();
        return {(int)cluster_ctarank(), (int)(blockIdx.x / CLUSTER), (int)(gridDim.x / CLUSTER)};
    } else {
        __syncthreads();
        return {0, (int)blockIdx.x, (int)gridDim.x};
    }
}

// One arrival on the barrier at `bar` in every CTA of the cluster: a consumer warp is done with a stage
// that any of them may have filled.
template <int CLUSTER>
__device__ __forceinline__ void mbar_arrive_all(unsigned bar) {
    if constexpr (CLUSTER > 1) {
#pragma unroll
        for (int r = 0; r < CLUSTER; ++r) mbar_arrive_cluster(bar, r);
    } else {
        mbar_arrive(bar);
    }
}

// The last step of a clustered kernel: no CTA leaves while a peer's copies into it or arrivals on its
// barriers may still come.
template <int CLUSTER>
__device__ __forceinline__ void leave_cluster() {
    if constexpr (CLUSTER > 1) cluster_sync();
}

// tma_load_2d into `dst` of every CTA in `mask` (bit i: cluster rank i), completing on the barrier at
// `bar` of each of them.
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const TensorMap* map, unsigned bar, int c0, int c1,
                                                      unsigned short mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, { %3, %4 }], [%2], %5;\n"
                 :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1), "h"(mask)
                 : "memory");
}
{% if BATCHED is defined and BATCHED %}

// The same over a batched map (common/tma_batch.cuh): the member's batch coordinates outermost.
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const TensorMap* map, unsigned bar, int c0, int c1,
                                                      unsigned short mask, const BatchAt& at) {
    asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, { %3, %4, %5, %6, %7 }], [%2], %8;\n"
                 :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1),
                    "r"(at.d[2]), "r"(at.d[1]), "r"(at.d[0]), "h"(mask)
                 : "memory");
}
{% endif %}
