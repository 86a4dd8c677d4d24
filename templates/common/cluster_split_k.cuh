// ---- split-K inside a cluster (sm_90): a cluster's blocks share one C tile, each summing a K slice -----
// Their fp32 partial tiles meet in distributed shared memory instead of global memory: no workspace, no
// counters, no round trip through L2. Each block keeps its partial in its own shared memory and announces
// it on the `full` barrier of every block of the cluster. Each block then sums the 4-element fragment
// groups it owns (a contiguous share of the tile: cluster_split_k_owner) from every block's partial, its
// own included, in rank order 0, 1, ..., so the result is bitwise the same whatever the timing, and
// announces on every block's `free` barrier that it has read them. A block overwrites its partial with
// the next tile's only once `free` says every block has read the last one.

// The generic address of rank's copy of this block's shared object at p: plain loads reach it, which the
// compiler schedules as any other (several peers' in flight at once).
template <typename T>
__device__ __forceinline__ const T* cluster_peer(const T* p, unsigned rank) {
    unsigned long long remote;
    asm("mapa.u64 %0, %1, %2;\n" : "=l"(remote) : "l"(reinterpret_cast<unsigned long long>(p)), "r"(rank));
    return reinterpret_cast<const T*>(remote);
}

// Makes this thread's earlier memory accesses (and those a __syncwarp ordered before them) visible to
// the cluster before its later ones: one fence, then plain arrivals. Arrivals with .release.cluster
// semantics each cost about as much as the fence (H100, 512×576×7168 in clusters of four 128×128 blocks:
// the exchange took 5.5 µs with them, 2.8 with one fence a warp and no `free` after the last tile).
__device__ __forceinline__ void fence_acq_rel_cluster() { asm volatile("fence.acq_rel.cluster;\n" ::: "memory"); }

// Which block of SPLITS sums (and stores) fragment group g of GROUPS.
template <int SPLITS, int GROUPS>
__device__ __forceinline__ int cluster_split_k_owner(int g) { return g * SPLITS / GROUPS; }

// Called by the THREADS_ consumer threads of every block of the cluster, once per tile, with `round` the
// tiles summed before and `more` whether another follows. `red` is this block's THREADS_ * MI * N floats
// in shared memory, one float4 per fragment group and thread (group g of thread c at g * THREADS_ + c: a
// warp's access is 512 contiguous bytes); `full` and `free_` are barriers of 4 * (THREADS_ / 128) *
// SPLITS arrivals. Afterwards acc holds the whole sum in the groups this block owns.
template <int SPLITS, int THREADS_, int MI, int N>
__device__ __forceinline__ void cluster_split_k_sum(float (&acc)[MI][N], float4* red, unsigned full, unsigned free_,
                                                    int rank, int c, int round, bool more) {
    constexpr int GROUPS = MI * N / 4;
    const bool leader = c % 32 == 0;
    if (round > 0) mbar_wait<true>(free_, (round - 1) & 1);  // every block read the last partial
#pragma unroll
    for (int g = 0; g < GROUPS; ++g) {
        const float* x = &acc[(4 * g) / N][(4 * g) % N];
        red[g * THREADS_ + c] = make_float4(x[0], x[1], x[2], x[3]);
    }
    __syncwarp();
    if (leader) {
        fence_acq_rel_cluster();
#pragma unroll
        for (int r = 0; r < SPLITS; ++r) mbar_arrive_cluster(full, r);
    }
    mbar_wait<true>(full, round & 1);
    const float4* peer[SPLITS];
#pragma unroll
    for (int s = 0; s < SPLITS; ++s) peer[s] = cluster_peer<float4>(red, s);
#pragma unroll
    for (int g = 0; g < GROUPS; ++g) {
        if (cluster_split_k_owner<SPLITS, GROUPS>(g) != rank) continue;
        float4 part[SPLITS];  // every block's partial of the group (this block's own too), loaded together
#pragma unroll
        for (int s = 0; s < SPLITS; ++s) part[s] = peer[s][g * THREADS_ + c];
        float* x = &acc[(4 * g) / N][(4 * g) % N];
        x[0] = x[1] = x[2] = x[3] = 0.f;
#pragma unroll
        for (int s = 0; s < SPLITS; ++s) {
            x[0] += part[s].x;
            x[1] += part[s].y;
            x[2] += part[s].z;
            x[3] += part[s].w;
        }
    }
    if (!more) return;  // the cluster's last tile: its final cluster barrier keeps every partial alive
    __syncwarp();
    if (leader) {
        fence_acq_rel_cluster();
#pragma unroll
        for (int r = 0; r < SPLITS; ++r) mbar_arrive_cluster(free_, r);
    }
}
