// Connected components by union-find, in the style of ECL-CC
// (J. Jaiganesh and M. Burtscher, "A high-performance connected components
// implementation for GPUs", HPDC 2018, doi:10.1145/3208040.3208041), working on
// an edge list instead of CSR, plus a grid search that unites points closer than
// a distance.
//
// The forest lives in `parent`: parent[v] <= v always, so every tree is rooted at
// the smallest vertex of its component and the final numbering is canonical.
// Race-freedom: parent entries are only read and written through volatile
// accesses (relaxed atomics in the PTX memory model: never torn, never cached in
// registers) or atomics; roots change only by atomicCAS, and every write lowers a
// value to another vertex of the same tree, so concurrent path compression and
// hooking cannot lose a union.
//
// IdxT: vertex index type, int (fewer than 2^31 vertices) or long long.

// ivote_cc_find: representative of v, halving the path on the way (ECL-CC's
// "intermediate pointer jumping").
template <typename IdxT>
__device__ __forceinline__ IdxT ivote_cc_find(volatile IdxT* parent, IdxT v)
{
    IdxT curr = parent[v];
    if (curr != v) {
        IdxT prev = v;
        IdxT next;
        while (curr > (next = parent[curr])) {
            parent[prev] = next;
            prev = curr;
            curr = next;
        }
    }
    return curr;
}

__device__ __forceinline__ int ivote_cc_cas(int* address, int expected, int desired)
{
    return atomicCAS(address, expected, desired);
}

__device__ __forceinline__ long long ivote_cc_cas(long long* address, long long expected, long long desired)
{
    return (long long)atomicCAS((unsigned long long*)address, (unsigned long long)expected,
                                (unsigned long long)desired);
}

// ivote_cc_unite: join the trees of u and v, hooking the larger root under the
// smaller one with atomicCAS; on a lost race, continue from the value found.
template <typename IdxT>
__device__ __forceinline__ void ivote_cc_unite(IdxT* parent, IdxT u, IdxT v)
{
    volatile IdxT* vparent = parent;
    IdxT ru = ivote_cc_find<IdxT>(vparent, u);
    IdxT rv = ivote_cc_find<IdxT>(vparent, v);
    while (ru != rv) {
        if (ru < rv) {
            const IdxT seen = ivote_cc_cas(&parent[rv], rv, ru);
            if (seen == rv) break;
            rv = ivote_cc_find<IdxT>(vparent, seen);
        } else {
            const IdxT seen = ivote_cc_cas(&parent[ru], ru, rv);
            if (seen == ru) break;
            ru = ivote_cc_find<IdxT>(vparent, seen);
        }
    }
}

// ivote_cc_init<IdxT>: parent[v] = min(v, smallest neighbour of v). parent must
// hold 0..n-1 on entry; edges is (n_edges, 2) row-major, self-loops are ignored.
template <typename IdxT>
__global__ void ivote_cc_init(const IdxT* __restrict__ edges, const long long n_edges,
                              IdxT* __restrict__ parent)
{
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n_edges;
         e += (long long)blockDim.x * gridDim.x) {
        const IdxT a = edges[2 * e];
        const IdxT b = edges[2 * e + 1];
        if (a < b) {
            atomicMin(&parent[b], a);
        } else if (b < a) {
            atomicMin(&parent[a], b);
        }
    }
}

// ivote_cc_hook<IdxT>: unite the endpoints of every edge.
template <typename IdxT>
__global__ void ivote_cc_hook(const IdxT* __restrict__ edges, const long long n_edges,
                              IdxT* parent)
{
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n_edges;
         e += (long long)blockDim.x * gridDim.x) {
        const IdxT a = edges[2 * e];
        const IdxT b = edges[2 * e + 1];
        if (a != b) ivote_cc_unite<IdxT>(parent, a, b);
    }
}

// ivote_cc_flatten<IdxT>: parent[v] = root of v, so every vertex points at the
// smallest vertex of its component. Run after all hooking has finished.
template <typename IdxT>
__global__ void ivote_cc_flatten(IdxT* parent, const long long n)
{
    volatile IdxT* vparent = parent;
    for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < n;
         v += (long long)blockDim.x * gridDim.x) {
        IdxT root = vparent[v];
        IdxT next;
        while (root != (next = vparent[root])) root = next;
        vparent[v] = root;
    }
}

// ivote_cc_cluster_grid<IdxT, NDIM>: unite every pair of points at most
// sqrt(radius2) apart. Points are sorted by grid cell (cells at least the
// distance wide): coords (n, NDIM) and cells (n, NDIM) in that order,
// point_index the original index of each sorted point, cell_keys the sorted
// distinct linear cell keys and cell_start (n_cells + 1) where each cell's points
// begin. Each pair is examined once, from its first point in sorted order.
// Squared distances use round-to-nearest intrinsics (no FMA contraction), so they
// equal the NumPy reference bit for bit.
template <typename IdxT, int NDIM>
__global__ void ivote_cc_cluster_grid(const double* __restrict__ coords,
                                      const long long* __restrict__ cells,
                                      const IdxT* __restrict__ point_index,
                                      const long long* __restrict__ cell_keys,
                                      const IdxT* __restrict__ cell_start,
                                      const long long n_cells,
                                      const long long* __restrict__ extent,
                                      const double radius2, const long long n,
                                      IdxT* parent)
{
    int n_offsets = 1;
    for (int d = 0; d < NDIM; ++d) n_offsets *= 3;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)blockDim.x * gridDim.x) {
        for (int offset = 0; offset < n_offsets; ++offset) {
            long long key = 0;
            bool inside = true;
            int code = offset;
            for (int d = 0; d < NDIM; ++d) {
                const long long c = cells[i * NDIM + d] + (code % 3) - 1;
                code /= 3;
                if (c < 0 || c >= extent[d]) { inside = false; break; }
                key = key * extent[d] + c;
            }
            if (!inside) continue;
            long long lo = 0, hi = n_cells;  // lower bound of key in cell_keys
            while (lo < hi) {
                const long long mid = (lo + hi) >> 1;
                if (cell_keys[mid] < key) lo = mid + 1; else hi = mid;
            }
            if (lo == n_cells || cell_keys[lo] != key) continue;
            const long long first = (long long)cell_start[lo];
            const long long last = (long long)cell_start[lo + 1];
            for (long long j = (first > i + 1 ? first : i + 1); j < last; ++j) {
                double d2 = 0.0;
                for (int d = 0; d < NDIM; ++d) {
                    const double diff = __dsub_rn(coords[i * NDIM + d], coords[j * NDIM + d]);
                    d2 = __dadd_rn(d2, __dmul_rn(diff, diff));
                }
                if (d2 <= radius2) ivote_cc_unite<IdxT>(parent, point_index[i], point_index[j]);
            }
        }
    }
}

// Id compaction by hashing, the alternative to sorting every endpoint: each
// endpoint finds (or claims) a slot of an open-addressing table of 64-bit ids,
// chunk by chunk as the ids arrive from the host; afterwards only the distinct
// ids are sorted. Empty slots hold ~0, so the id ~0 itself is given the slot
// `mask + 1` just past the table and flagged in has_max.

// ivote_cc_mix: splitmix64's finaliser, spreading nearby ids over the table.
__device__ __forceinline__ unsigned long long ivote_cc_mix(unsigned long long x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

// ivote_cc_hash_insert<SlotT>: slot[i] = the table slot holding ids[i], inserting
// it by linear probing (table of mask + 1 slots, a power of two, at most half
// full). A slot, once claimed by atomicCAS, never changes, so a plain (volatile)
// read that finds the id is final. The thread that claims a slot also appends its
// id and slot to keys/key_slots (counters[0]: how many; one atomicAdd per warp),
// so the distinct ids are known without scanning the table; counters[1] = 1 when
// the id ~0 occurs. The loop runs the same iterations in every lane of a warp
// (blockDim a multiple of 32), so the warp's votes see all its lanes.
template <typename SlotT>
__global__ void ivote_cc_hash_insert(const unsigned long long* __restrict__ ids, const long long n,
                                     unsigned long long* table, const unsigned long long mask,
                                     SlotT* __restrict__ slot, unsigned long long* __restrict__ keys,
                                     SlotT* __restrict__ key_slots, unsigned long long* counters)
{
    const unsigned long long empty = ~0ULL;
    volatile unsigned long long* vtable = table;
    const int lane = threadIdx.x & 31;
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long base = (long long)blockIdx.x * blockDim.x; base < n; base += stride) {
        const long long i = base + threadIdx.x;
        const bool valid = i < n;
        const unsigned active = __ballot_sync(0xffffffffu, valid);
        if (!valid) break;  // only in a block's last iteration: the next base is past n
        const unsigned long long id = ids[i];
        bool claimed = false;
        SlotT here;
        if (id == empty) {
            here = (SlotT)(mask + 1);
            counters[1] = 1ULL;
        } else {
            unsigned long long h = ivote_cc_mix(id) & mask;
            while (true) {
                unsigned long long seen = vtable[h];
                if (seen == empty) {
                    seen = atomicCAS(&table[h], empty, id);
                    if (seen == empty) {
                        claimed = true;
                        break;
                    }
                }
                if (seen == id) break;
                h = (h + 1) & mask;
            }
            here = (SlotT)h;
        }
        slot[i] = here;
        const unsigned claims = __ballot_sync(active, claimed);
        if (claims) {
            const int leader = __ffs(claims) - 1;
            unsigned long long first = 0;
            if (lane == leader) first = atomicAdd(&counters[0], (unsigned long long)__popc(claims));
            first = __shfl_sync(active, first, leader);
            if (claimed) {
                const unsigned long long at = first + __popc(claims & ((1u << lane) - 1u));
                keys[at] = id;
                key_slots[at] = here;
            }
        }
    }
}

// ivote_cc_sizes<IdxT>: sizes[c] += 1 for every vertex's component c (sizes zeroed). The
// lanes of a warp with the same component add once together (__match_any_sync): a giant
// component would otherwise be one hot atomic for most of its vertices.
template <typename IdxT>
__global__ void ivote_cc_sizes(const IdxT* __restrict__ component, const long long n,
                               unsigned long long* sizes)
{
    const int lane = threadIdx.x & 31;
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long base = (long long)blockIdx.x * blockDim.x; base < n; base += stride) {
        const long long i = base + threadIdx.x;
        const bool valid = i < n;
        const unsigned active = __ballot_sync(0xffffffffu, valid);
        if (!valid) break;
        const IdxT c = component[i];
#if __CUDA_ARCH__ >= 700
        const unsigned same = __match_any_sync(active, c);
        if (lane == __ffs(same) - 1) atomicAdd(&sizes[c], (unsigned long long)__popc(same));
#else
        (void)active;
        (void)lane;
        atomicAdd(&sizes[c], 1ULL);
#endif
    }
}

#ifdef IVOTE_NVCC_CHECK
template __global__ void ivote_cc_hash_insert<int>(const unsigned long long*, const long long,
                                                   unsigned long long*, const unsigned long long, int*,
                                                   unsigned long long*, int*, unsigned long long*);
template __global__ void ivote_cc_hash_insert<long long>(const unsigned long long*, const long long,
                                                         unsigned long long*, const unsigned long long,
                                                         long long*, unsigned long long*, long long*,
                                                         unsigned long long*);
template __global__ void ivote_cc_sizes<int>(const int*, const long long, unsigned long long*);
template __global__ void ivote_cc_sizes<long long>(const long long*, const long long, unsigned long long*);
#endif
