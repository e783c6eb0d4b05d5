// Iterative voting (Parvin et al. 2007; Saadatifard et al. 2018), 2D and 3D.
//
// Compiled with --fmad=false: every float operation that decides whether a
// pixel lies in a voter's cone is rounded exactly as NumPy rounds it in
// ivote/detect/_reference.py, so both backends find the same cells. Weights and
// votes are unsigned integers, so atomic accumulation in any order gives the
// same vote field on every run.
//
// Layout: images are C-ordered (Z, Y, X); 2D images are NDIM=2 with Z=1.
// Voters are given by their flat index; directions are int16 vectors of about
// 32767 in length, NDIM per voter, in physical (spacing-scaled) coordinates.

// ivote_diff: one component of np.gradient (edge_order=1) at position `pos`
// along an axis of length n, stride `stride`, spacing h.
__device__ __forceinline__ double ivote_diff(const double* f, long long idx, long long stride,
                                             long long pos, long long n, double h)
{
    if (n < 2) return 0.0;
    if (pos == 0) return (f[idx + stride] - f[idx]) / h;
    if (pos == n - 1) return (f[idx] - f[idx - stride]) / h;
    return (f[idx + stride] - f[idx - stride]) / (2.0 * h);
}

// ivote_gradient_at: the gradient (z, y, x components; z = 0 in 2D) at flat index idx.
template <int NDIM, typename Index>
__device__ __forceinline__ void ivote_gradient_at(const double* f, Index idx, int Z, int Y, int X,
                                                  double sz, double sy, double sx, double g[3])
{
    const long long x = idx % X;
    const long long y = (idx / X) % Y;
    const long long z = idx / ((long long)X * Y);
    g[0] = (NDIM == 3) ? ivote_diff(f, idx, (long long)X * Y, z, Z, sz) : 0.0;
    g[1] = ivote_diff(f, idx, X, y, Y, sy);
    g[2] = ivote_diff(f, idx, 1, x, X, sx);
}

// ivote_gradient_max<NDIM, Index>: *largest = max |grad f| over the image, as
// the bits of a non-negative double (ordered like unsigned integers), so the
// atomic maximum is exact in any order.
template <int NDIM, typename Index>
__global__ void ivote_gradient_max(const double* __restrict__ f, Index size, int Z, int Y, int X, double sz,
                                   double sy, double sx, unsigned long long* __restrict__ largest)
{
    double local = 0.0;
    for (Index i = (Index)blockIdx.x * blockDim.x + threadIdx.x; i < size; i += (Index)blockDim.x * gridDim.x) {
        double g[3];
        ivote_gradient_at<NDIM, Index>(f, i, Z, Y, X, sz, sy, sx, g);
        const double magnitude = sqrt((g[0] * g[0] + g[1] * g[1]) + g[2] * g[2]);
        if (magnitude > local) local = magnitude;
    }
    atomicMax(largest, (unsigned long long)__double_as_longlong(local));
}

// ivote_quantise_weights<NDIM, Index>: weights[i] = floor(|grad f| * (scale /
// largest) + 0.5), the integer voting weight of every pixel (scale <= 65535).
template <int NDIM, typename Index>
__global__ void ivote_quantise_weights(const double* __restrict__ f, Index size, int Z, int Y, int X, double sz,
                                       double sy, double sx, const unsigned long long* __restrict__ largest,
                                       double scale, unsigned short* __restrict__ weights)
{
    const double factor = scale / __longlong_as_double((long long)*largest);
    for (Index i = (Index)blockIdx.x * blockDim.x + threadIdx.x; i < size; i += (Index)blockDim.x * gridDim.x) {
        double g[3];
        ivote_gradient_at<NDIM, Index>(f, i, Z, Y, X, sz, sy, sx, g);
        const double magnitude = sqrt((g[0] * g[0] + g[1] * g[1]) + g[2] * g[2]);
        weights[i] = (unsigned short)floor(magnitude * factor + 0.5);
    }
}

// ivote_initial_directions<NDIM, Index>: each voter's direction along (sign=+1)
// or against (sign=-1) its gradient, as int16 of length ~32767.
template <int NDIM, typename Index>
__global__ void ivote_initial_directions(const double* __restrict__ f, const Index* __restrict__ voters,
                                         long long n_voters, int Z, int Y, int X, double sz, double sy,
                                         double sx, double sign, short* __restrict__ directions)
{
    const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_voters) return;
    double g[3];
    ivote_gradient_at<NDIM, Index>(f, voters[j], Z, Y, X, sz, sy, sx, g);
    const double norm = sqrt((g[0] * g[0] + g[1] * g[1]) + g[2] * g[2]);
    for (int i = 0; i < NDIM; ++i) {
        directions[j * NDIM + i] = (short)rint(((sign * g[i + 3 - NDIM]) / norm) * 32767.0);
    }
}

// Cone tables (ivote/detect/_cone_tables.py): each voter walks the list of
// offsets of its direction's bin, a small superset of its cone (about 1.3x in
// 2D, 1.5-2x in 3D), in lexicographic order, and makes the exact test: voter j
// adds weights[j] to every pixel p with 0 < |p - t| < radius and
// dot(p - t, a) >= cos_half * |p - t| * |a| (physical units). Measured on an
// H100, the passes took 1.7x (2D) to 2.6x (3D) less time than with the cone's
// axis-aligned bounding box, which holds 20-130 box cells per cone cell once
// the cone is narrow and diagonal.

// ivote_direction_bin<NDIM>: the cube-map bin of direction (az, ay, ax) (2D:
// the square map of (ay, ax)): the largest |component| (first on ties) and its
// sign pick a face; every other component divided by it picks one of `cells`
// cells along that face axis. Same float32 operations as direction_bins().
template <int NDIM>
__device__ __forceinline__ int ivote_direction_bin(float az, float ay, float ax, int cells)
{
    const float c[3] = {az, ay, ax};
    const int base = 3 - NDIM;
    int axis = base;
    float major = fabsf(c[base]);
    for (int i = base + 1; i < 3; ++i) {
        if (fabsf(c[i]) > major) {
            axis = i;
            major = fabsf(c[i]);
        }
    }
    int bin = 2 * (axis - base) + (c[axis] < 0.0f ? 1 : 0);
    const float half_cells = 0.5f * (float)cells;
    for (int i = base; i < 3; ++i) {
        if (i == axis) continue;
        const float u = c[i] / major;
        int cell = (int)floorf((u + 1.0f) * half_cells);
        cell = cell < 0 ? 0 : (cell > cells - 1 ? cells - 1 : cell);
        bin = bin * cells + cell;
    }
    return bin;
}

// ivote_unpack<NDIM>: a packed table entry -> pixel offset (dz, dy, dx).
template <int NDIM>
__device__ __forceinline__ void ivote_unpack(int packed, int* dz, int* dy, int* dx)
{
    if (NDIM == 2) {
        *dz = 0;
        *dy = packed >> 16;  // arithmetic shift: the signed upper half
        *dx = (int)(short)(packed & 0xFFFF);
    } else {
        const unsigned int bits = (unsigned int)packed;
        *dz = (int)((bits >> 20) & 0x3FFu) - 512;
        *dy = (int)((bits >> 10) & 0x3FFu) - 512;
        *dx = (int)(bits & 0x3FFu) - 512;
    }
}

// The voter's position, direction (float) and table range, shared by the
// vote and turn kernels below.
struct IvoteTableCone {
    int z, y, x;
    float az, ay, ax, norm_a;
    int first, last;
};

template <int NDIM, typename Index>
__device__ __forceinline__ IvoteTableCone ivote_table_cone(Index t, const short* directions, long long j, int Y, int X,
                                                           int cells, const int* __restrict__ starts)
{
    IvoteTableCone c;
    c.x = (int)(t % X);
    c.y = (int)((t / X) % Y);
    c.z = (int)(t / ((Index)X * Y));
    c.az = (NDIM == 3) ? (float)directions[j * NDIM] : 0.0f;
    c.ay = (float)directions[j * NDIM + NDIM - 2];
    c.ax = (float)directions[j * NDIM + NDIM - 1];
    c.norm_a = sqrtf((c.az * c.az + c.ay * c.ay) + c.ax * c.ax);
    const int bin = ivote_direction_bin<NDIM>(c.az, c.ay, c.ax, cells);
    c.first = __ldg(starts + bin);
    c.last = __ldg(starts + bin + 1);
    return c;
}

// ivote_in_cone: whether offset (dz, dy, dx) of voter c passes the exact
// float32 cone test; o receives the physical offset (oz, oy, ox) and its
// squared length. Same operations, same order, as _reference._in_cone.
__device__ __forceinline__ bool ivote_in_cone(const IvoteTableCone& c, int dz, int dy, int dx, float sz, float sy,
                                              float sx, float cos_half, float o[4])
{
    o[0] = (float)dz * sz;
    o[1] = (float)dy * sy;
    o[2] = (float)dx * sx;
    o[3] = (o[0] * o[0] + o[1] * o[1]) + o[2] * o[2];
    const float dot = (o[0] * c.az + o[1] * c.ay) + o[2] * c.ax;
    return dot >= (cos_half * sqrtf(o[3])) * c.norm_a;
}

// The turn step's running maximum: the largest vote seen in the cone and the
// offset where it is (the first such offset: later ties do not replace it).
struct IvoteBest {
    unsigned int vote;
    float o[4];
};

__device__ __forceinline__ void ivote_keep_best(IvoteBest* best, unsigned int v, const float o[4])
{
    if (v > best->vote) {
        best->vote = v;
        for (int i = 0; i < 4; ++i) best->o[i] = o[i];
    }
}

// ivote_turn_to: point voter j at its best offset (scaled to 32767); unchanged
// when its cone held no vote.
template <int NDIM>
__device__ __forceinline__ void ivote_turn_to(short* directions, long long j, const IvoteBest& best)
{
    if (best.vote == 0) return;
    const float norm = sqrtf(best.o[3]);
    if (NDIM == 3) directions[j * NDIM] = (short)rintf((best.o[0] / norm) * 32767.0f);
    directions[j * NDIM + NDIM - 2] = (short)rintf((best.o[1] / norm) * 32767.0f);
    directions[j * NDIM + NDIM - 1] = (short)rintf((best.o[2] / norm) * 32767.0f);
}

// ivote_vote_table<NDIM, Index>: scatter. Voter j adds weights[j] to every
// pixel of its cone (exact test above) among its bin's offsets. votes must be
// zeroed first.
template <int NDIM, typename Index>
__global__ void ivote_vote_table(const Index* __restrict__ voters, const unsigned int* __restrict__ weights,
                                 const short* __restrict__ directions, long long n_voters, int Z, int Y, int X,
                                 float sz, float sy, float sx, float cos_half, int cells,
                                 const int* __restrict__ starts, const int* __restrict__ entries,
                                 unsigned int* __restrict__ votes)
{
    const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_voters) return;
    const IvoteTableCone c = ivote_table_cone<NDIM, Index>(voters[j], directions, j, Y, X, cells, starts);
    const unsigned int w = weights[j];
    for (int e = c.first; e < c.last; ++e) {
        int dz, dy, dx;
        ivote_unpack<NDIM>(__ldg(entries + e), &dz, &dy, &dx);
        const int pz = c.z + dz, py = c.y + dy, px = c.x + dx;
        if ((unsigned int)px >= (unsigned int)X || (unsigned int)py >= (unsigned int)Y) continue;
        if (NDIM == 3 && (unsigned int)pz >= (unsigned int)Z) continue;
        float o[4];
        if (ivote_in_cone(c, dz, dy, dx, sz, sy, sx, cos_half, o)) atomicAdd(votes + ((Index)pz * Y + py) * X + px, w);
    }
}

// ivote_turn_table<NDIM, Index>: voter j turns towards the largest vote inside
// its cone (first in lexicographic offset order on ties, as the bin's offsets
// are listed); unchanged if the cone holds no vote. The new direction is the
// physical offset scaled to 32767.
template <int NDIM, typename Index>
__global__ void ivote_turn_table(const Index* __restrict__ voters, short* __restrict__ directions, long long n_voters,
                                 int Z, int Y, int X, float sz, float sy, float sx, float cos_half, int cells,
                                 const int* __restrict__ starts, const int* __restrict__ entries,
                                 const unsigned int* __restrict__ votes)
{
    const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_voters) return;
    const IvoteTableCone c = ivote_table_cone<NDIM, Index>(voters[j], directions, j, Y, X, cells, starts);
    IvoteBest best = {0u, {0.0f, 0.0f, 0.0f, 0.0f}};
    for (int e = c.first; e < c.last; ++e) {
        int dz, dy, dx;
        ivote_unpack<NDIM>(__ldg(entries + e), &dz, &dy, &dx);
        const int pz = c.z + dz, py = c.y + dy, px = c.x + dx;
        if ((unsigned int)px >= (unsigned int)X || (unsigned int)py >= (unsigned int)Y) continue;
        if (NDIM == 3 && (unsigned int)pz >= (unsigned int)Z) continue;
        float o[4];
        if (ivote_in_cone(c, dz, dy, dx, sz, sy, sx, cos_half, o)) {
            ivote_keep_best(&best, __ldg(votes + ((Index)pz * Y + py) * X + px), o);
        }
    }
    ivote_turn_to<NDIM>(directions, j, best);
}

// Tiled passes for wide cones. One block per TZ x TY x TX tile of pixels, a
// thread per pixel (voter_of maps a pixel to its voter, -1 if it does not
// vote). The block's votes land in the tile grown by the window (wz, wy, wx)
// on every side, a box held in dynamic shared memory: the voters add there
// (shared-memory atomics) and the block then adds each non-zero cell to the
// image once, so a wide cone (hundreds of cells) costs a handful of global
// atomics per voter instead of hundreds. Integer sums: same votes as above.
struct IvoteTile {
    int z0, y0, x0;  // the tile's first pixel
    int lz, ly, lx;  // this thread's pixel in the tile
    int bz, by, bx;  // the box's extent
};

template <int NDIM, int TZ, int TY, int TX>
__device__ __forceinline__ IvoteTile ivote_tile(int Y, int X, int wz, int wy, int wx)
{
    IvoteTile t;
    const int tiles_x = (X + TX - 1) / TX, tiles_y = (Y + TY - 1) / TY;
    int b = blockIdx.x;
    t.x0 = (b % tiles_x) * TX;
    b /= tiles_x;
    t.y0 = (b % tiles_y) * TY;
    t.z0 = (b / tiles_y) * TZ;
    t.lx = threadIdx.x % TX;
    t.ly = (threadIdx.x / TX) % TY;
    t.lz = threadIdx.x / (TX * TY);
    t.bz = TZ + 2 * wz;
    t.by = TY + 2 * wy;
    t.bx = TX + 2 * wx;
    return t;
}

// ivote_vote_tiled<NDIM, TZ, TY, TX>: ivote_vote_table for the voters of a
// tile, accumulated in shared memory (TZ * TY * TX threads per block).
template <int NDIM, int TZ, int TY, int TX>
__global__ void ivote_vote_tiled(const int* __restrict__ voter_of, const unsigned int* __restrict__ weights,
                                 const short* __restrict__ directions, int Z, int Y, int X, float sz, float sy,
                                 float sx, float cos_half, int cells, const int* __restrict__ starts,
                                 const int* __restrict__ entries, int wz, int wy, int wx,
                                 unsigned int* __restrict__ votes)
{
    extern __shared__ unsigned int ivote_box[];
    const IvoteTile t = ivote_tile<NDIM, TZ, TY, TX>(Y, X, wz, wy, wx);
    const int n_box = t.bz * t.by * t.bx;
    for (int i = threadIdx.x; i < n_box; i += blockDim.x) ivote_box[i] = 0u;
    __syncthreads();
    const int z = t.z0 + t.lz, y = t.y0 + t.ly, x = t.x0 + t.lx;
    const int j = (z < Z && y < Y && x < X) ? voter_of[(z * Y + y) * X + x] : -1;
    if (j >= 0) {
        const IvoteTableCone c = ivote_table_cone<NDIM, int>((z * Y + y) * X + x, directions, j, Y, X, cells, starts);
        const unsigned int w = weights[j];
        for (int e = c.first; e < c.last; ++e) {
            int dz, dy, dx;
            ivote_unpack<NDIM>(__ldg(entries + e), &dz, &dy, &dx);
            const int pz = z + dz, py = y + dy, px = x + dx;
            if ((unsigned int)px >= (unsigned int)X || (unsigned int)py >= (unsigned int)Y) continue;
            if (NDIM == 3 && (unsigned int)pz >= (unsigned int)Z) continue;
            float o[4];
            if (ivote_in_cone(c, dz, dy, dx, sz, sy, sx, cos_half, o)) {
                atomicAdd(ivote_box + ((t.lz + wz + dz) * t.by + (t.ly + wy + dy)) * t.bx + (t.lx + wx + dx), w);
            }
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n_box; i += blockDim.x) {
        const unsigned int v = ivote_box[i];
        if (v == 0u) continue;  // only cells inside the image ever receive votes
        const int bx_ = i % t.bx, by_ = (i / t.bx) % t.by, bz_ = i / (t.bx * t.by);
        atomicAdd(votes + ((t.z0 - wz + bz_) * Y + (t.y0 - wy + by_)) * X + (t.x0 - wx + bx_), v);
    }
}

// ivote_turn_tiled<NDIM, TZ, TY, TX>: ivote_turn_table for the voters of a
// tile, reading the votes of the tile's box from shared memory (0 outside the
// image, where no cone cell is ever chosen).
template <int NDIM, int TZ, int TY, int TX>
__global__ void ivote_turn_tiled(const int* __restrict__ voter_of, short* __restrict__ directions, int Z, int Y,
                                 int X, float sz, float sy, float sx, float cos_half, int cells,
                                 const int* __restrict__ starts, const int* __restrict__ entries, int wz, int wy,
                                 int wx, const unsigned int* __restrict__ votes)
{
    extern __shared__ unsigned int ivote_box[];
    const IvoteTile t = ivote_tile<NDIM, TZ, TY, TX>(Y, X, wz, wy, wx);
    const int n_box = t.bz * t.by * t.bx;
    for (int i = threadIdx.x; i < n_box; i += blockDim.x) {
        const int px = t.x0 - wx + i % t.bx, py = t.y0 - wy + (i / t.bx) % t.by, pz = t.z0 - wz + i / (t.bx * t.by);
        const bool inside = (unsigned int)px < (unsigned int)X && (unsigned int)py < (unsigned int)Y &&
                            (NDIM == 2 || (unsigned int)pz < (unsigned int)Z);
        ivote_box[i] = inside ? __ldg(votes + (pz * Y + py) * X + px) : 0u;
    }
    __syncthreads();
    const int z = t.z0 + t.lz, y = t.y0 + t.ly, x = t.x0 + t.lx;
    const int j = (z < Z && y < Y && x < X) ? voter_of[(z * Y + y) * X + x] : -1;
    if (j < 0) return;
    const IvoteTableCone c = ivote_table_cone<NDIM, int>((z * Y + y) * X + x, directions, j, Y, X, cells, starts);
    IvoteBest best = {0u, {0.0f, 0.0f, 0.0f, 0.0f}};
    for (int e = c.first; e < c.last; ++e) {
        int dz, dy, dx;
        ivote_unpack<NDIM>(__ldg(entries + e), &dz, &dy, &dx);
        float o[4];
        if (ivote_in_cone(c, dz, dy, dx, sz, sy, sx, cos_half, o)) {
            ivote_keep_best(&best, ivote_box[((t.lz + wz + dz) * t.by + (t.ly + wy + dy)) * t.bx + (t.lx + wx + dx)], o);
        }
    }
    ivote_turn_to<NDIM>(directions, j, best);
}

// ivote_close_pairs<NDIM>: for the local maxima (flat indices, best first),
// every pair (better i, worse j) closer than the radius: j scans the voting
// disc/ball (`offsets`, packed as the cone tables, all with |offset| < radius
// by the same float32 test) in `rank`, an image holding each maximum's place
// in the order (-1 elsewhere). Pairs go to pairs[0..capacity) through the
// counter *n_pairs (which may exceed capacity: the caller then retries).
template <int NDIM>
__global__ void ivote_close_pairs(const int* __restrict__ maxima, int n_maxima, const int* __restrict__ rank, int Z,
                                  int Y, int X, const int* __restrict__ offsets, int n_offsets,
                                  int* __restrict__ n_pairs, int2* __restrict__ pairs, int capacity)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_maxima) return;
    const int t = maxima[j];
    const int x = t % X, y = (t / X) % Y, z = t / (X * Y);
    for (int e = 0; e < n_offsets; ++e) {
        int dz, dy, dx;
        ivote_unpack<NDIM>(__ldg(offsets + e), &dz, &dy, &dx);
        const int pz = z + dz, py = y + dy, px = x + dx;
        if ((unsigned int)px >= (unsigned int)X || (unsigned int)py >= (unsigned int)Y) continue;
        if (NDIM == 3 && (unsigned int)pz >= (unsigned int)Z) continue;
        const int i = __ldg(rank + (pz * Y + py) * X + px);
        if (i >= 0 && i < j) {
            const int slot = atomicAdd(n_pairs, 1);
            if (slot < capacity) pairs[slot] = make_int2(i, j);
        }
    }
}

#ifdef IVOTE_NVCC_CHECK
#define IVOTE_INSTANTIATE(NDIM, INDEX)                                                                               \
    template __global__ void ivote_vote_table<NDIM, INDEX>(const INDEX*, const unsigned int*, const short*, long long, \
                                                           int, int, int, float, float, float, float, int, const int*, \
                                                           const int*, unsigned int*);                                 \
    template __global__ void ivote_turn_table<NDIM, INDEX>(const INDEX*, short*, long long, int, int, int, float,      \
                                                           float, float, float, int, const int*, const int*,           \
                                                           const unsigned int*);
IVOTE_INSTANTIATE(2, int)
IVOTE_INSTANTIATE(3, int)
IVOTE_INSTANTIATE(3, long long)
#undef IVOTE_INSTANTIATE
template __global__ void ivote_vote_tiled<2, 1, 16, 16>(const int*, const unsigned int*, const short*, int, int, int,
                                                        float, float, float, float, int, const int*, const int*, int,
                                                        int, int, unsigned int*);
template __global__ void ivote_turn_tiled<3, 4, 8, 8>(const int*, short*, int, int, int, float, float, float, float, int,
                                                      const int*, const int*, int, int, int, const unsigned int*);
template __global__ void ivote_close_pairs<2>(const int*, int, const int*, int, int, int, const int*, int, int*, int2*,
                                              int);
template __global__ void ivote_close_pairs<3>(const int*, int, const int*, int, int, int, const int*, int, int*, int2*,
                                              int);
#endif
