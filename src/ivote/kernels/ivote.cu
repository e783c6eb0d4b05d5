// Iterative voting (Parvin et al. 2007; Saadatifard et al. 2018), 2D and 3D.
//
// Compiled with --fmad=false: every float operation that decides whether a
// pixel lies in a voter's cone is rounded exactly as NumPy rounds it in
// ivote/detect/_reference.py, so both backends find the same cells. Weights and
// votes are unsigned integers, so atomic accumulation in any order gives the
// same vote field on every run.
//
// Layout: images are C-ordered (Z, Y, X); 2D images are NDIM=2 with Z=1.
// Voters are dense: every pixel has a uint16 weight (0: it does not vote) and
// an int16 direction of NDIM components (about 32767 long, physical
// coordinates), stored at directions[pixel * NDIM].
//
// Statistics stay on the GPU: `stats` is an array of unsigned 64-bit slots
// (ivote/detect/_cuda.py names them) written with exact atomic maxima, read by
// later kernels through the pointer, and copied to the host once, with the
// results, at the end of a detection.

// ---------------------------------------------------------------------------
// Reductions and image statistics
// ---------------------------------------------------------------------------

// ivote_key: a double as an unsigned integer of the same order (negative
// values below positive ones), so an atomic maximum on keys is exact; and back.
__device__ __forceinline__ unsigned long long ivote_key(double v)
{
    const unsigned long long u = (unsigned long long)__double_as_longlong(v);
    return (u >> 63) ? ~u : (u | 0x8000000000000000ull);
}

__device__ __forceinline__ double ivote_from_key(unsigned long long k)
{
    const unsigned long long u = (k >> 63) ? (k & 0x7FFFFFFFFFFFFFFFull) : ~k;
    return __longlong_as_double((long long)u);
}

// ivote_block_max: the largest v of the block, valid in thread 0 (every
// thread of the block must call it).
__device__ __forceinline__ unsigned long long ivote_block_max(unsigned long long v)
{
    __shared__ unsigned long long partial[32];
    __syncthreads();  // partial may still be read by a previous call
    for (int s = 16; s > 0; s >>= 1) {
        const unsigned long long o = __shfl_down_sync(0xFFFFFFFFu, v, s);
        v = o > v ? o : v;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)((blockDim.x + 31) / 32) ? partial[lane] : 0ull;
        for (int s = 16; s > 0; s >>= 1) {
            const unsigned long long o = __shfl_down_sync(0xFFFFFFFFu, v, s);
            v = o > v ? o : v;
        }
    }
    return v;
}

// ivote_min_max<T>: the image's finite minimum and maximum and whether it holds
// NaN/Inf: stats[0] = max of ~key (the minimum), stats[1] = max of key,
// stats[2] = 1 if any value is not finite. stats must be zeroed first.
template <typename T>
__global__ void ivote_min_max(const T* __restrict__ f, long long size, unsigned long long* __restrict__ stats)
{
    unsigned long long low = 0ull, high = 0ull, bad = 0ull;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < size; i += (long long)blockDim.x * gridDim.x) {
        const double v = (double)f[i];
        if (!isfinite(v)) {
            bad = 1ull;
            continue;
        }
        const unsigned long long k = ivote_key(v);
        low = (~k) > low ? ~k : low;
        high = k > high ? k : high;
    }
    low = ivote_block_max(low);
    high = ivote_block_max(high);
    bad = ivote_block_max(bad);
    if (threadIdx.x == 0) {
        if (low) atomicMax(stats, low);
        if (high) atomicMax(stats + 1, high);
        if (bad) atomicMax(stats + 2, bad);
    }
}

// ivote_blur_axis<T, NORMALISE, FUSED>: one axis of the separable Gaussian
// pre-blur, the operations of cupyx.scipy.ndimage.correlate1d (mode
// 'reflect'): out[i] = sum over k of in[reflect(pos + k - taps / 2)] * w[k],
// k ascending, taps with a zero weight skipped, each step a fused multiply-add
// (FUSED, as CuPy's generated kernel compiles) or a product then a sum. With
// NORMALISE, in = (f - min) / (max - min) from ivote_min_max (0 for a constant
// image), as the NumPy path normalises before its blur; taps = 1 with w = {1}
// only normalises. Axis: length n, stride `stride` (elements).
template <typename T, bool NORMALISE, bool FUSED>
__global__ void ivote_blur_axis(const T* __restrict__ f, int size, int n, int stride,
                                const double* __restrict__ weights, int taps,
                                const unsigned long long* __restrict__ stats, double* __restrict__ out)
{
    const long long thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // no int wrap below 2**31
    if (thread >= size) return;
    const int i = (int)thread;
    double low = 0.0, range = 1.0;
    if (NORMALISE) {
        low = ivote_from_key(~stats[0]);
        range = ivote_from_key(stats[1]) - low;
    }
    const int pos = (i / stride) % n;
    const int base = i - pos * stride;
    const int half = taps / 2;
    const bool inside = pos >= half && pos + half < n;  // no tap reflects: no index arithmetic
    double sum = 0.0;
    for (int k = 0; k < taps; ++k) {
        const double w = __ldg(weights + k);
        if (w == 0.0) continue;
        int ix = pos - half + k;
        if (!inside) {
            if (ix < 0) ix = -1 - ix;
            ix %= 2 * n;
            ix = min(ix, 2 * n - 1 - ix);
        }
        double v = (double)f[base + ix * stride];
        if (NORMALISE) v = range > 0.0 ? (v - low) / range : 0.0;
        if (FUSED) {
            sum = fma(v, w, sum);
        } else {
            const double product = v * w;
            sum = sum + product;
        }
    }
    out[i] = sum;
}

// ---------------------------------------------------------------------------
// Gradient, weights, initial directions
// ---------------------------------------------------------------------------

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
    const Index x = idx % X;
    const Index y = (idx / X) % Y;
    const Index z = idx / ((Index)X * Y);
    g[0] = (NDIM == 3) ? ivote_diff(f, idx, (long long)X * Y, z, Z, sz) : 0.0;
    g[1] = ivote_diff(f, idx, X, y, Y, sy);
    g[2] = ivote_diff(f, idx, 1, x, X, sx);
}

// ivote_gradient_max<NDIM, Index>: *largest = max |grad f| over the image, as
// the bits of a non-negative double (ordered like unsigned integers), so the
// atomic maximum is exact in any order; one atomic per block.
template <int NDIM, typename Index>
__global__ void ivote_gradient_max(const double* __restrict__ f, Index size, int Z, int Y, int X, double sz,
                                   double sy, double sx, unsigned long long* __restrict__ largest)
{
    double local = 0.0;
    // 64-bit loop index: with int, i + stride wraps to negative for the last stride below 2**31
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < size; i += (long long)blockDim.x * gridDim.x) {
        double g[3];
        ivote_gradient_at<NDIM, Index>(f, (Index)i, Z, Y, X, sz, sy, sx, g);
        const double magnitude = sqrt((g[0] * g[0] + g[1] * g[1]) + g[2] * g[2]);
        if (magnitude > local) local = magnitude;
    }
    const unsigned long long bits = ivote_block_max((unsigned long long)__double_as_longlong(local));
    if (threadIdx.x == 0 && bits) atomicMax(largest, bits);
}

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

// ivote_voters<NDIM, Index>: every pixel's integer weight floor(|grad f| *
// (scale / largest) + 0.5), or 0 below min_weight (it does not vote; also
// when the image is flat), and each voter's initial direction: along
// (sign=+1) or against (sign=-1) its gradient, as int16 of length ~32767,
// then quantised to the offset direction offset_directions[offset_of_bin[b]]
// of its bin b in a cube map of `cells` per face axis (as every backend:
// ivote/detect/_cone_tables.py initial_directions; cells 0: not quantised,
// a plan without offsets).
template <int NDIM, typename Index>
__global__ void ivote_voters(const double* __restrict__ f, Index size, int Z, int Y, int X, double sz, double sy,
                             double sx, const unsigned long long* __restrict__ largest, double scale,
                             unsigned int min_weight, double sign, int cells, const int* __restrict__ offset_of_bin,
                             const short* __restrict__ offset_directions, unsigned short* __restrict__ weights,
                             short* __restrict__ directions)
{
    const double top = __longlong_as_double((long long)*largest);
    const double factor = scale / top;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < size; i += (long long)blockDim.x * gridDim.x) {
        double g[3];
        ivote_gradient_at<NDIM, Index>(f, (Index)i, Z, Y, X, sz, sy, sx, g);
        const double magnitude = sqrt((g[0] * g[0] + g[1] * g[1]) + g[2] * g[2]);
        unsigned int w = 0u;
        if (top > 0.0) {
            const double q = floor(magnitude * factor + 0.5);
            if (q >= (double)min_weight) w = (unsigned int)q;
        }
        weights[i] = (unsigned short)w;
        if (w) {
            short d[3] = {0, 0, 0};
            for (int c = 3 - NDIM; c < 3; ++c) d[c] = (short)rint(((sign * g[c]) / magnitude) * 32767.0);
            const short* chosen = d + 3 - NDIM;
            if (cells > 0) {
                const int k = offset_of_bin[ivote_direction_bin<NDIM>((float)d[0], (float)d[1], (float)d[2], cells)];
                chosen = offset_directions + (long long)k * NDIM;
            }
            for (int c = 0; c < NDIM; ++c) directions[i * NDIM + c] = chosen[c];
        }
    }
}

// ---------------------------------------------------------------------------
// Voting passes
// ---------------------------------------------------------------------------

// Cone tables (ivote/detect/_cone_tables.py): each voter walks the list of
// offsets of its direction's bin, a small superset of its cone (about 1.3x in
// 2D, 1.5-2x in 3D), in lexicographic order, and makes the exact test: voter t
// adds weights[t] to every pixel p with 0 < |p - t| < radius and
// dot(p - t, a) >= cos_half * |p - t| * |a| (physical units). Measured on an
// H100, the passes took 1.7x (2D) to 2.6x (3D) less time than with the cone's
// axis-aligned bounding box, which holds 20-130 box cells per cone cell once
// the cone is narrow and diagonal. In 2D, `limits` holds cos_half * |p - t| of
// every entry, computed on the host with the same float32 operations (sqrt is
// correctly rounded on both), so the test costs a dot product per entry; in 3D
// the tables are too large for the L1 cache and a second load per entry costs
// more than the square root (measured on an H100: 1.7x slower passes), so the
// kernels compute it.

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

// The voter's position, direction (float), table range and whether its whole
// window (wz, wy, wx) lies inside the image (then no offset needs a bounds test).
struct IvoteTableCone {
    int z, y, x;
    float az, ay, ax, norm_a;
    int first, last;
    bool interior;
};

// ivote_table_cone<NDIM, Index>: the cone of the voter at pixel t. In 2D the z
// terms are left out of the sums: adding +0 first changes no bit of them.
template <int NDIM, typename Index>
__device__ __forceinline__ IvoteTableCone ivote_table_cone(Index t, const short* __restrict__ directions, int Z, int Y,
                                                           int X, int cells, const int* __restrict__ starts, int wz,
                                                           int wy, int wx)
{
    IvoteTableCone c;
    c.x = (int)(t % X);
    c.y = (int)((t / X) % Y);
    c.z = (int)(t / ((Index)X * Y));
    const long long d = (long long)t * NDIM;  // over 2**31 with int pixel indices from 2**31 / NDIM pixels
    c.az = (NDIM == 3) ? (float)directions[d] : 0.0f;
    c.ay = (float)directions[d + NDIM - 2];
    c.ax = (float)directions[d + NDIM - 1];
    c.norm_a = (NDIM == 3) ? sqrtf((c.az * c.az + c.ay * c.ay) + c.ax * c.ax) : sqrtf(c.ay * c.ay + c.ax * c.ax);
    const int bin = ivote_direction_bin<NDIM>(c.az, c.ay, c.ax, cells);
    c.first = __ldg(starts + bin);
    c.last = __ldg(starts + bin + 1);
    c.interior = c.x >= wx && c.x + wx < X && c.y >= wy && c.y + wy < Y && (NDIM == 2 || (c.z >= wz && c.z + wz < Z));
    return c;
}

// ivote_in_cone<NDIM>: whether offset (dz, dy, dx), entry e, of voter c passes
// the exact float32 cone test dot(o, a) >= (cos_half * |o|) * |a| (2D: the
// entry's limit from the table). Same operations, same order, as
// _reference._in_cone (which sums NDIM terms: in 2D the z terms are not added).
template <int NDIM>
__device__ __forceinline__ bool ivote_in_cone(const IvoteTableCone& c, int dz, int dy, int dx, float sz, float sy,
                                              float sx, const float* __restrict__ limits, int e, float cos_half)
{
    const float oy = (float)dy * sy, ox = (float)dx * sx;
    if (NDIM == 3) {
        const float oz = (float)dz * sz;
        const float dot = (oz * c.az + oy * c.ay) + ox * c.ax;
        return dot >= (cos_half * sqrtf((oz * oz + oy * oy) + ox * ox)) * c.norm_a;
    }
    return oy * c.ay + ox * c.ax >= __ldg(limits + e) * c.norm_a;
}

// ivote_outside<NDIM>: whether offset (dz, dy, dx) of voter c leaves the image.
template <int NDIM>
__device__ __forceinline__ bool ivote_outside(const IvoteTableCone& c, int dz, int dy, int dx, int Z, int Y, int X)
{
    if ((unsigned int)(c.x + dx) >= (unsigned int)X || (unsigned int)(c.y + dy) >= (unsigned int)Y) return true;
    return NDIM == 3 && (unsigned int)(c.z + dz) >= (unsigned int)Z;
}

// ivote_vote_cone<NDIM, CHECK, Index>: the voter adds w to every cell of its
// cone, cell (dz, dy, dx) at target + dz * stride_z + dy * stride_y + dx (the
// vote field, or a tile's box in shared memory). CHECK: skip offsets leaving
// the image.
template <int NDIM, bool CHECK, typename Index>
__device__ __forceinline__ void ivote_vote_cone(const IvoteTableCone& c, unsigned int w, const int* __restrict__ entries,
                                                const float* __restrict__ limits, int Z, int Y, int X, float sz,
                                                float sy, float sx, float cos_half, unsigned int* target, Index stride_z,
                                                Index stride_y)
{
    for (int e = c.first; e < c.last; ++e) {
        int dz, dy, dx;
        ivote_unpack<NDIM>(__ldg(entries + e), &dz, &dy, &dx);
        if (CHECK && ivote_outside<NDIM>(c, dz, dy, dx, Z, Y, X)) continue;
        if (ivote_in_cone<NDIM>(c, dz, dy, dx, sz, sy, sx, limits, e, cos_half)) {
            atomicAdd(target + ((Index)dz * stride_z + (Index)dy * stride_y + dx), w);
        }
    }
}

// The turn step's running maximum: the largest vote seen in the cone and the
// offset where it is (the first such offset: later ties do not replace it).
struct IvoteBest {
    unsigned int vote;
    int dz, dy, dx;
};

// ivote_turn_cone<NDIM, CHECK, Index>: the largest vote in the voter's cone,
// read at source + dz * stride_z + dy * stride_y + dx (first in the table's
// lexicographic order on ties). CHECK: skip offsets leaving the image.
template <int NDIM, bool CHECK, typename Index>
__device__ __forceinline__ IvoteBest ivote_turn_cone(const IvoteTableCone& c, const int* __restrict__ entries,
                                                     const float* __restrict__ limits, int Z, int Y, int X, float sz,
                                                     float sy, float sx, float cos_half, const unsigned int* source,
                                                     Index stride_z,
                                                     Index stride_y)
{
    IvoteBest best = {0u, 0, 0, 0};
    for (int e = c.first; e < c.last; ++e) {
        int dz, dy, dx;
        ivote_unpack<NDIM>(__ldg(entries + e), &dz, &dy, &dx);
        if (CHECK && ivote_outside<NDIM>(c, dz, dy, dx, Z, Y, X)) continue;
        if (ivote_in_cone<NDIM>(c, dz, dy, dx, sz, sy, sx, limits, e, cos_half)) {
            const unsigned int v = source[(Index)dz * stride_z + (Index)dy * stride_y + dx];
            if (v > best.vote) {
                best.vote = v;
                best.dz = dz;
                best.dy = dy;
                best.dx = dx;
            }
        }
    }
    return best;
}

// ivote_turn_to: point the voter at pixel t at its best offset, the physical
// offset divided by its length and scaled to 32767 (plan.offset_directions);
// unchanged when its cone held no vote.
template <int NDIM, typename Index>
__device__ __forceinline__ void ivote_turn_to(short* directions, Index t, const IvoteBest& best, float sz, float sy,
                                              float sx)
{
    if (best.vote == 0) return;
    const float oz = (float)best.dz * sz, oy = (float)best.dy * sy, ox = (float)best.dx * sx;
    const float norm = (NDIM == 3) ? sqrtf((oz * oz + oy * oy) + ox * ox) : sqrtf(oy * oy + ox * ox);
    const long long d = (long long)t * NDIM;  // 64-bit: see ivote_table_cone
    if (NDIM == 3) directions[d] = (short)rintf((oz / norm) * 32767.0f);
    directions[d + NDIM - 2] = (short)rintf((oy / norm) * 32767.0f);
    directions[d + NDIM - 1] = (short)rintf((ox / norm) * 32767.0f);
}

// ivote_vote_table<NDIM, Index>: scatter, one thread per pixel. The voter at
// pixel t adds weights[t] to every pixel of its cone (exact test above) among
// its bin's offsets; (wz, wy, wx) is the largest offset per axis. votes must be
// zeroed first.
template <int NDIM, typename Index>
__global__ void ivote_vote_table(const unsigned short* __restrict__ weights, const short* __restrict__ directions,
                                 Index size, int Z, int Y, int X, float sz, float sy, float sx, float cos_half, int cells,
                                 const int* __restrict__ starts, const int* __restrict__ entries,
                                 const float* __restrict__ limits, int wz, int wy, int wx,
                                 unsigned int* __restrict__ votes)
{
    const long long thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // no int wrap below 2**31
    if (thread >= size) return;
    const Index t = (Index)thread;
    const unsigned int w = weights[t];
    if (w == 0u) return;
    const IvoteTableCone c = ivote_table_cone<NDIM, Index>(t, directions, Z, Y, X, cells, starts, wz, wy, wx);
    const Index plane = (Index)Y * X;
    if (c.interior) {
        ivote_vote_cone<NDIM, false, Index>(c, w, entries, limits, Z, Y, X, sz, sy, sx, cos_half, votes + t, plane, (Index)X);
    } else {
        ivote_vote_cone<NDIM, true, Index>(c, w, entries, limits, Z, Y, X, sz, sy, sx, cos_half, votes + t, plane, (Index)X);
    }
}

// ivote_turn_table<NDIM, Index>: the voter at pixel t turns towards the largest
// vote inside its cone (first in lexicographic offset order on ties, as the
// bin's offsets are listed); unchanged if the cone holds no vote. Every thread
// also zeroes its pixel of `clear`, the other vote buffer, which the next pass
// fills.
template <int NDIM, typename Index>
__global__ void ivote_turn_table(const unsigned short* __restrict__ weights, short* __restrict__ directions,
                                 Index size, int Z, int Y, int X, float sz, float sy, float sx, float cos_half, int cells,
                                 const int* __restrict__ starts, const int* __restrict__ entries,
                                 const float* __restrict__ limits, int wz, int wy, int wx,
                                 const unsigned int* __restrict__ votes, unsigned int* __restrict__ clear)
{
    const long long thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // no int wrap below 2**31
    if (thread >= size) return;
    const Index t = (Index)thread;
    clear[t] = 0u;
    if (weights[t] == 0u) return;
    const IvoteTableCone c = ivote_table_cone<NDIM, Index>(t, directions, Z, Y, X, cells, starts, wz, wy, wx);
    const Index plane = (Index)Y * X;
    const IvoteBest best =
        c.interior ? ivote_turn_cone<NDIM, false, Index>(c, entries, limits, Z, Y, X, sz, sy, sx, cos_half, votes + t, plane, (Index)X)
                   : ivote_turn_cone<NDIM, true, Index>(c, entries, limits, Z, Y, X, sz, sy, sx, cos_half, votes + t, plane, (Index)X);
    ivote_turn_to<NDIM, Index>(directions, t, best, sz, sy, sx);
}

// Tiled passes for wide cones. One block per TZ x TY x TX tile of pixels, a
// thread per pixel. The block's votes land in the tile grown by the window
// (wz, wy, wx) on every side, a box held in dynamic shared memory: the voters
// add there (shared-memory atomics) and the block then adds each non-zero cell
// to the image once, so a wide cone (hundreds of cells) costs a handful of
// global atomics per voter instead of hundreds. Integer sums: same votes as
// above.
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
__global__ void ivote_vote_tiled(const unsigned short* __restrict__ weights, const short* __restrict__ directions,
                                 int Z, int Y, int X, float sz, float sy, float sx, float cos_half, int cells,
                                 const int* __restrict__ starts, const int* __restrict__ entries,
                                 const float* __restrict__ limits, int wz, int wy, int wx,
                                 unsigned int* __restrict__ votes)
{
    extern __shared__ unsigned int ivote_box[];
    const IvoteTile t = ivote_tile<NDIM, TZ, TY, TX>(Y, X, wz, wy, wx);
    const int n_box = t.bz * t.by * t.bx;
    for (int i = threadIdx.x; i < n_box; i += blockDim.x) ivote_box[i] = 0u;
    __syncthreads();
    const int z = t.z0 + t.lz, y = t.y0 + t.ly, x = t.x0 + t.lx;
    const bool in_image = z < Z && y < Y && x < X;
    const int p = in_image ? (z * Y + y) * X + x : 0;  // past the image it could pass 2**31
    const unsigned int w = in_image ? weights[p] : 0u;
    if (w) {
        const IvoteTableCone c = ivote_table_cone<NDIM, int>(p, directions, Z, Y, X, cells, starts, wz, wy, wx);
        unsigned int* centre = ivote_box + ((t.lz + wz) * t.by + (t.ly + wy)) * t.bx + (t.lx + wx);
        if (c.interior) {
            ivote_vote_cone<NDIM, false, int>(c, w, entries, limits, Z, Y, X, sz, sy, sx, cos_half, centre, t.by * t.bx, t.bx);
        } else {
            ivote_vote_cone<NDIM, true, int>(c, w, entries, limits, Z, Y, X, sz, sy, sx, cos_half, centre, t.by * t.bx, t.bx);
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
// image, where no cone cell is ever chosen: no bounds test); each thread
// zeroes its pixel of `clear`, the other vote buffer.
template <int NDIM, int TZ, int TY, int TX>
__global__ void ivote_turn_tiled(const unsigned short* __restrict__ weights, short* __restrict__ directions, int Z,
                                 int Y, int X, float sz, float sy, float sx, float cos_half, int cells,
                                 const int* __restrict__ starts,
                                 const int* __restrict__ entries, const float* __restrict__ limits, int wz, int wy,
                                 int wx, const unsigned int* __restrict__ votes, unsigned int* __restrict__ clear)
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
    if (z >= Z || y >= Y || x >= X) return;
    const int p = (z * Y + y) * X + x;
    clear[p] = 0u;
    if (weights[p] == 0u) return;
    const IvoteTableCone c = ivote_table_cone<NDIM, int>(p, directions, Z, Y, X, cells, starts, wz, wy, wx);
    const unsigned int* centre = ivote_box + ((t.lz + wz) * t.by + (t.ly + wy)) * t.bx + (t.lx + wx);
    const IvoteBest best =
        ivote_turn_cone<NDIM, false, int>(c, entries, limits, Z, Y, X, sz, sy, sx, cos_half, centre, t.by * t.bx, t.bx);
    ivote_turn_to<NDIM, int>(directions, p, best, sz, sy, sx);
}

// ---------------------------------------------------------------------------
// Cells: local maxima and the pairs closer than the radius
// ---------------------------------------------------------------------------

// ivote_local_maxima<NDIM>: the pixels whose positive vote no pixel of the box
// of half-width (hz, hy, hx) around them exceeds (scipy's maximum_filter with
// cval 0, compared for equality). Each sets is_maximum[t] = 1 (zeroed first)
// and takes a slot of maxima[0..capacity) through the counter *n_maxima (which
// may exceed capacity: the caller then retries), holding (t, vote). Each
// thread first tests its 3^NDIM neighbourhood: most pixels are on a slope and
// stop there. The few that pass (about 5% at 1024^2) are then tested against
// the whole box by their whole warp, one after the other, 32 cells at a time
// from the centre out: one thread scanning a 17 x 17 box alone kept its warp
// waiting. Every lane of a warp reaches the ballot, so no thread returns
// before it.
template <int NDIM>
__global__ void ivote_local_maxima(const unsigned int* __restrict__ votes, int Z, int Y, int X, int hz, int hy, int hx,
                                   unsigned char* __restrict__ is_maximum, unsigned long long* __restrict__ n_maxima,
                                   uint2* __restrict__ maxima, int capacity)
{
    const long long thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // no int wrap below 2**31
    const int lane = threadIdx.x & 31;
    const bool inside = thread < (long long)Z * Y * X;
    const int t = inside ? (int)thread : 0;
    const unsigned int v = inside ? __ldg(votes + t) : 0u;
    bool candidate = v != 0u;
    if (candidate) {
        const int x = t % X, y = (t / X) % Y, z = t / (X * Y);
        const int rz = min(hz, 1), ry = min(hy, 1), rx = min(hx, 1);
        const int z0 = max(z - rz, 0), z1 = min(z + rz, Z - 1);
        const int y0 = max(y - ry, 0), y1 = min(y + ry, Y - 1);
        const int x0 = max(x - rx, 0), x1 = min(x + rx, X - 1);
        for (int qz = z0; qz <= z1 && candidate; ++qz) {
            for (int qy = y0; qy <= y1 && candidate; ++qy) {
                const unsigned int* row = votes + (qz * Y + qy) * X;
                for (int qx = x0; qx <= x1; ++qx) {
                    if (__ldg(row + qx) > v) {
                        candidate = false;
                        break;
                    }
                }
            }
        }
    }
    unsigned int pending = __ballot_sync(0xFFFFFFFFu, candidate);
    bool beaten = false;
    const int wz = 2 * hz + 1, wy = 2 * hy + 1, wx = 2 * hx + 1;
    const int cells = wz * wy * wx;
    while (pending) {
        const int source = __ffs(pending) - 1;
        pending &= pending - 1;
        const int s = __shfl_sync(0xFFFFFFFFu, t, source);
        const unsigned int vs = __shfl_sync(0xFFFFFFFFu, v, source);
        const int x = s % X, y = (s / X) % Y, z = s / (X * Y);
        bool any = false;
        // rows from the centre out (y, y - 1, y + 1, ...; planes likewise): a larger vote is
        // most often near, and the warp stops at the first 32 cells that hold one
        for (int base = 0; base < cells && !any; base += 32) {
            const int c = base + lane;
            bool greater = false;
            if (c < cells) {
                const int row = c / wx, iy = row % wy, iz = row / wy;
                const int qx = x + c % wx - hx;
                const int qy = y + (iy + 1) / 2 * ((iy & 1) ? -1 : 1);
                const int qz = z + (iz + 1) / 2 * ((iz & 1) ? -1 : 1);
                if ((unsigned int)qx < (unsigned int)X && (unsigned int)qy < (unsigned int)Y
                    && (unsigned int)qz < (unsigned int)Z)
                    greater = __ldg(votes + (qz * Y + qy) * X + qx) > vs;
            }
            any = __any_sync(0xFFFFFFFFu, greater);
        }
        if (lane == source) beaten = any;
    }
    if (!candidate || beaten) return;
    is_maximum[t] = 1;
    const unsigned long long slot = atomicAdd(n_maxima, 1ull);
    if (slot < (unsigned long long)capacity) maxima[slot] = make_uint2((unsigned int)t, v);
}

// ivote_close_pairs<NDIM>: for every listed maximum j (maxima[0..min(*n_maxima,
// capacity))), each better maximum i in its voting disc/ball (`offsets`,
// packed as the cone tables, all with |offset| < radius by the same float32
// test): better is a larger vote, or the same vote at a lower flat index (the
// order of the greedy scan). The pair goes to pairs[0..pair_capacity), as
// (flat i, vote i, flat j, vote j), through the counter *n_pairs (which may
// exceed the capacity: the caller then retries). One warp per maximum, its
// lanes taking every 32nd offset: one thread per maximum left most of the GPU
// idle (a few thousand threads, each walking hundreds of offsets; 83 us at
// 1024^2 on an H100).
template <int NDIM>
__global__ void ivote_close_pairs(const uint2* __restrict__ maxima, const unsigned long long* __restrict__ n_maxima,
                                  int capacity, const unsigned char* __restrict__ is_maximum,
                                  const unsigned int* __restrict__ votes, int Z, int Y, int X,
                                  const int* __restrict__ offsets, int n_offsets, unsigned long long* __restrict__ n_pairs,
                                  uint4* __restrict__ pairs, int pair_capacity)
{
    const int j = (int)(((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5);
    const int lane = threadIdx.x & 31;
    const unsigned long long listed = *n_maxima;
    if (j >= capacity || (unsigned long long)j >= listed) return;
    const uint2 m = maxima[j];
    const int t = (int)m.x;
    const int x = t % X, y = (t / X) % Y, z = t / (X * Y);
    for (int e = lane; e < n_offsets; e += 32) {
        int dz, dy, dx;
        ivote_unpack<NDIM>(__ldg(offsets + e), &dz, &dy, &dx);
        const int pz = z + dz, py = y + dy, px = x + dx;
        if ((unsigned int)px >= (unsigned int)X || (unsigned int)py >= (unsigned int)Y) continue;
        if (NDIM == 3 && (unsigned int)pz >= (unsigned int)Z) continue;
        const int q = (pz * Y + py) * X + px;
        if (!__ldg(is_maximum + q)) continue;
        const unsigned int vq = __ldg(votes + q);
        if (vq > m.y || (vq == m.y && q < t)) {
            const unsigned long long slot = atomicAdd(n_pairs, 1ull);
            if (slot < (unsigned long long)pair_capacity) pairs[slot] = make_uint4((unsigned int)q, vq, (unsigned int)t, m.y);
        }
    }
}

// ---------------------------------------------------------------------------
// Contrast of the cells against the image noise (ivote/detect/_contrast.py)
// ---------------------------------------------------------------------------

// ivote_noise_samples<T>: at each listed pixel t (positions[0..n), at least one
// pixel inside every border), the residual of the normalised image from the
// mean of its 3^ndim box: f(t) - (sum of the box, offsets in C order, added one
// by one from 0.0) / 3^ndim, the normalisation (f - min) / (max - min) of the
// blur (0 for a constant image). The NumPy reference adds in the same order.
template <typename T>
__global__ void ivote_noise_samples(const T* __restrict__ f, int ndim, int Y, int X,
                                    const long long* __restrict__ positions, int n,
                                    const unsigned long long* __restrict__ stats, double* __restrict__ residuals)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const double low = ivote_from_key(~stats[0]);
    const double range = ivote_from_key(stats[1]) - low;
    const long long t = positions[i];
    const long long plane = (long long)Y * X;
    const int rz = ndim == 3 ? 1 : 0;
    double sum = 0.0;
    for (int dz = -rz; dz <= rz; ++dz) {
        for (int dy = -1; dy <= 1; ++dy) {
            for (int dx = -1; dx <= 1; ++dx) {
                const double v = (double)f[t + dz * plane + (long long)dy * X + dx];
                sum = sum + (range > 0.0 ? (v - low) / range : 0.0);
            }
        }
    }
    const double centre = range > 0.0 ? ((double)f[t] - low) / range : 0.0;
    residuals[i] = centre - sum / (ndim == 3 ? 27.0 : 9.0);
}

// ivote_contrast<NDIM, S>: for every listed maximum (maxima[0..min(*n_maxima,
// capacity))), one warp: the blurred image s (rounded to float, times `sign`:
// nuclei bright) at the maximum minus its minimum over the box of half-width
// min(w, distance to either border) per axis around it (clipped symmetrically,
// so that a ramp looks alike on both sides; float, exact in any order), as a
// double; 0 unless it is a bump: of the `ring` offsets (packed; the voting
// disc/ball's offsets at least half the radius long) that fit in that box, at
// least bump_part / bump_whole land on a pixel below centre - (centre - m) *
// depth, m the minimum over the box of half-width w clipped to the image
// (depth a power of two: the same float in any compilation; integer counts, in
// any order). The caller divides by the noise's standard deviation.
template <int NDIM, typename S>
__global__ void ivote_contrast(const S* __restrict__ s, int Z, int Y, int X, int wz, int wy, int wx, float sign,
                               const int* __restrict__ ring, int n_ring, int bump_part, int bump_whole, float depth,
                               const uint2* __restrict__ maxima, const unsigned long long* __restrict__ n_maxima,
                               int capacity, double* __restrict__ numerators)
{
    const int j = (int)(((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5);
    const int lane = threadIdx.x & 31;
    const unsigned long long listed = *n_maxima;
    if (j >= capacity || (unsigned long long)j >= listed) return;  // whole warps leave together
    const int t = (int)maxima[j].x;
    const int x = t % X, y = (t / X) % Y, z = t / (X * Y);
    const int hz = min(wz, min(z, Z - 1 - z)), hy = min(wy, min(y, Y - 1 - y)), hx = min(wx, min(x, X - 1 - x));
    const int z0 = max(z - wz, 0), y0 = max(y - wy, 0), x0 = max(x - wx, 0);
    const int nz = min(z + wz, Z - 1) - z0 + 1, ny = min(y + wy, Y - 1) - y0 + 1, nx = min(x + wx, X - 1) - x0 + 1;
    const int cells = nz * ny * nx;
    float deepest = __int_as_float(0x7f800000);  // +inf (NVRTC has no INFINITY): the window clipped to the image
    float lowest = deepest;                       // the window clipped symmetrically
    for (int c = lane; c < cells; c += 32) {
        const int qx = x0 + c % nx, qy = y0 + (c / nx) % ny, qz = z0 + c / (nx * ny);
        const float v = sign * (float)__ldg(s + ((long long)qz * Y + qy) * X + qx);
        deepest = fminf(deepest, v);
        if (abs(qz - z) <= hz && abs(qy - y) <= hy && abs(qx - x) <= hx) lowest = fminf(lowest, v);
    }
    for (int o = 16; o > 0; o >>= 1) {
        deepest = fminf(deepest, __shfl_xor_sync(0xFFFFFFFFu, deepest, o));
        lowest = fminf(lowest, __shfl_xor_sync(0xFFFFFFFFu, lowest, o));
    }
    const float centre = sign * (float)__ldg(s + t);
    const float level = centre - (centre - deepest) * depth;
    int fits = 0, lower = 0;
    for (int e = lane; e < n_ring; e += 32) {
        int dz, dy, dx;
        ivote_unpack<NDIM>(__ldg(ring + e), &dz, &dy, &dx);
        if (abs(dz) > hz || abs(dy) > hy || abs(dx) > hx) continue;
        ++fits;
        const float v = sign * (float)__ldg(s + ((long long)(z + dz) * Y + (y + dy)) * X + (x + dx));
        if (v < level) ++lower;
    }
    for (int o = 16; o > 0; o >>= 1) {
        fits += __shfl_xor_sync(0xFFFFFFFFu, fits, o);
        lower += __shfl_xor_sync(0xFFFFFFFFu, lower, o);
    }
    if (lane == 0) {
        const bool bump = fits > 0 && (long long)bump_whole * lower >= (long long)bump_part * fits;
        numerators[j] = bump ? (double)centre - (double)lowest : 0.0;
    }
}

#ifdef IVOTE_NVCC_CHECK
#define IVOTE_INSTANTIATE(NDIM, INDEX)                                                                                 \
    template __global__ void ivote_gradient_max<NDIM, INDEX>(const double*, INDEX, int, int, int, double, double,      \
                                                             double, unsigned long long*);                             \
    template __global__ void ivote_voters<NDIM, INDEX>(const double*, INDEX, int, int, int, double, double, double,    \
                                                       const unsigned long long*, double, unsigned int, double, int,  \
                                                       const int*, const short*, unsigned short*, short*);           \
    template __global__ void ivote_vote_table<NDIM, INDEX>(const unsigned short*, const short*, INDEX, int, int, int,  \
                                                           float, float, float, float, int, const int*, const int*,     \
                                                           const float*, int, int, int, unsigned int*);                \
    template __global__ void ivote_turn_table<NDIM, INDEX>(const unsigned short*, short*, INDEX, int, int, int, float,  \
                                                           float, float, float, int, const int*, const int*,            \
                                                           const float*,                                                \
                                                           int, int, int, const unsigned int*, unsigned int*);
IVOTE_INSTANTIATE(2, int)
IVOTE_INSTANTIATE(3, int)
IVOTE_INSTANTIATE(3, long long)
#undef IVOTE_INSTANTIATE
template __global__ void ivote_min_max<float>(const float*, long long, unsigned long long*);
template __global__ void ivote_min_max<unsigned short>(const unsigned short*, long long, unsigned long long*);
template __global__ void ivote_blur_axis<unsigned char, true, true>(const unsigned char*, int, int, int, const double*,
                                                                    int, const unsigned long long*, double*);
template __global__ void ivote_blur_axis<double, false, false>(const double*, int, int, int, const double*, int,
                                                               const unsigned long long*, double*);
#define IVOTE_INSTANTIATE_TILED(NDIM, TZ, TY, TX)                                                                      \
    template __global__ void ivote_vote_tiled<NDIM, TZ, TY, TX>(const unsigned short*, const short*, int, int, int,    \
                                                                float, float, float, float, int, const int*,           \
                                                                const int*, const float*, int, int, int,               \
                                                                unsigned int*);                                        \
    template __global__ void ivote_turn_tiled<NDIM, TZ, TY, TX>(const unsigned short*, short*, int, int, int, float,   \
                                                                float, float, float, int, const int*, const int*,      \
                                                                const float*, int, int, int, const unsigned int*,      \
                                                                unsigned int*);
IVOTE_INSTANTIATE_TILED(2, 1, 32, 32)
IVOTE_INSTANTIATE_TILED(3, 4, 8, 8)
#undef IVOTE_INSTANTIATE_TILED
template __global__ void ivote_local_maxima<2>(const unsigned int*, int, int, int, int, int, int, unsigned char*,
                                               unsigned long long*, uint2*, int);
template __global__ void ivote_local_maxima<3>(const unsigned int*, int, int, int, int, int, int, unsigned char*,
                                               unsigned long long*, uint2*, int);
template __global__ void ivote_close_pairs<2>(const uint2*, const unsigned long long*, int, const unsigned char*,
                                              const unsigned int*, int, int, int, const int*, int,
                                              unsigned long long*, uint4*, int);
template __global__ void ivote_close_pairs<3>(const uint2*, const unsigned long long*, int, const unsigned char*,
                                              const unsigned int*, int, int, int, const int*, int,
                                              unsigned long long*, uint4*, int);
template __global__ void ivote_noise_samples<unsigned char>(const unsigned char*, int, int, int, const long long*,
                                                            int, const unsigned long long*, double*);
template __global__ void ivote_noise_samples<double>(const double*, int, int, int, const long long*, int,
                                                     const unsigned long long*, double*);
template __global__ void ivote_contrast<2, double>(const double*, int, int, int, int, int, int, float, const int*, int,
                                                   int, int, float, const uint2*, const unsigned long long*, int,
                                                   double*);
template __global__ void ivote_contrast<3, float>(const float*, int, int, int, int, int, int, float, const int*, int,
                                                  int, int, float, const uint2*, const unsigned long long*, int,
                                                  double*);
#endif
