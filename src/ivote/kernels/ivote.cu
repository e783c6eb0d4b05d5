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

#define IVOTE_PI_F 3.14159265358979f

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

// ivote_gradient_magnitude<NDIM, Index>: magnitude[i] = |grad f| at every pixel.
template <int NDIM, typename Index>
__global__ void ivote_gradient_magnitude(const double* __restrict__ f, double* __restrict__ magnitude,
                                         Index size, int Z, int Y, int X, double sz, double sy, double sx)
{
    for (Index i = (Index)blockIdx.x * blockDim.x + threadIdx.x; i < size; i += (Index)blockDim.x * gridDim.x) {
        double g[3];
        ivote_gradient_at<NDIM, Index>(f, i, Z, Y, X, sz, sy, sx, g);
        magnitude[i] = sqrt((g[0] * g[0] + g[1] * g[1]) + g[2] * g[2]);
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

// Shared by the vote and turn kernels: the voter's position, direction and the
// axis-aligned box around its cone (a spherical sector of the radius and
// half-angle), clipped to the window and to the image. The box is slightly
// conservative; the exact test below decides.
struct IvoteCone {
    int pos[3];
    float a[3];
    float norm_a;
    int lo[3], hi[3];
};

template <int NDIM, typename Index>
__device__ __forceinline__ IvoteCone ivote_cone(Index t, const short* directions, long long j,
                                                const int dims[3], const float s[3], const int window[3],
                                                float radius, float half_angle)
{
    IvoteCone c;
    c.pos[2] = (int)(t % dims[2]);
    c.pos[1] = (int)((t / dims[2]) % dims[1]);
    c.pos[0] = (int)(t / ((Index)dims[2] * dims[1]));
    c.a[0] = (NDIM == 3) ? (float)directions[j * NDIM] : 0.0f;
    c.a[1] = (float)directions[j * NDIM + NDIM - 2];
    c.a[2] = (float)directions[j * NDIM + NDIM - 1];
    c.norm_a = sqrtf((c.a[0] * c.a[0] + c.a[1] * c.a[1]) + c.a[2] * c.a[2]);
    for (int i = 0; i < 3; ++i) {
        if (i == 0 && NDIM == 2) { c.lo[0] = c.hi[0] = 0; continue; }
        const float u = fminf(1.0f, fmaxf(-1.0f, c.a[i] / c.norm_a));
        const float alpha = acosf(u);  // angle between the axis and the cone's axis
        const float top = (alpha <= half_angle) ? radius : fmaxf(0.0f, radius * cosf(alpha - half_angle));
        const float bottom = (alpha + half_angle >= IVOTE_PI_F) ? -radius
                                                                 : fminf(0.0f, radius * cosf(alpha + half_angle));
        c.hi[i] = min(min(window[i], (int)ceilf(top / s[i] + 0.01f)), dims[i] - 1 - c.pos[i]);
        c.lo[i] = max(max(-window[i], (int)floorf(bottom / s[i] - 0.01f)), -c.pos[i]);
    }
    return c;
}

// ivote_vote<NDIM, Index>: scatter. Voter j adds weights[j] to every pixel p
// with 0 < |p - t| < radius and angle(p - t, a) <= half-angle, i.e.
// dot >= cos_half * |p - t| * |a| (physical units). votes must be zeroed first.
template <int NDIM, typename Index>
__global__ void ivote_vote(const Index* __restrict__ voters, const unsigned int* __restrict__ weights,
                           const short* __restrict__ directions, long long n_voters, int Z, int Y, int X,
                           float sz, float sy, float sx, int wz, int wy, int wx, float radius, float radius_sq,
                           float cos_half, float half_angle, unsigned int* __restrict__ votes)
{
    const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_voters) return;
    const int dims[3] = {Z, Y, X};
    const float s[3] = {sz, sy, sx};
    const int window[3] = {wz, wy, wx};
    const Index t = voters[j];
    const IvoteCone c = ivote_cone<NDIM, Index>(t, directions, j, dims, s, window, radius, half_angle);
    const unsigned int w = weights[j];
    for (int dz = c.lo[0]; dz <= c.hi[0]; ++dz) {
        const float oz = (float)dz * sz;
        for (int dy = c.lo[1]; dy <= c.hi[1]; ++dy) {
            const float oy = (float)dy * sy;
            const Index row = t + ((Index)dz * Y + dy) * X;
            for (int dx = c.lo[2]; dx <= c.hi[2]; ++dx) {
                const float ox = (float)dx * sx;
                const float d2 = (oz * oz + oy * oy) + ox * ox;
                if (!(d2 < radius_sq) || (dz == 0 && dy == 0 && dx == 0)) continue;
                const float dot = (oz * c.a[0] + oy * c.a[1]) + ox * c.a[2];
                if (dot >= (cos_half * sqrtf(d2)) * c.norm_a) atomicAdd(votes + row + dx, w);
            }
        }
    }
}

// ivote_turn<NDIM, Index>: voter j turns towards the largest vote inside its
// cone (first in lexicographic offset order on ties); unchanged if the cone
// holds no vote. The new direction is the physical offset scaled to 32767.
template <int NDIM, typename Index>
__global__ void ivote_turn(const Index* __restrict__ voters, short* __restrict__ directions, long long n_voters,
                           int Z, int Y, int X, float sz, float sy, float sx, int wz, int wy, int wx, float radius,
                           float radius_sq, float cos_half, float half_angle, const unsigned int* __restrict__ votes)
{
    const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_voters) return;
    const int dims[3] = {Z, Y, X};
    const float s[3] = {sz, sy, sx};
    const int window[3] = {wz, wy, wx};
    const Index t = voters[j];
    const IvoteCone c = ivote_cone<NDIM, Index>(t, directions, j, dims, s, window, radius, half_angle);
    unsigned int best = 0;
    float best_o[3] = {0.0f, 0.0f, 0.0f};
    float best_d2 = 0.0f;
    for (int dz = c.lo[0]; dz <= c.hi[0]; ++dz) {
        const float oz = (float)dz * sz;
        for (int dy = c.lo[1]; dy <= c.hi[1]; ++dy) {
            const float oy = (float)dy * sy;
            const Index row = t + ((Index)dz * Y + dy) * X;
            for (int dx = c.lo[2]; dx <= c.hi[2]; ++dx) {
                const float ox = (float)dx * sx;
                const float d2 = (oz * oz + oy * oy) + ox * ox;
                if (!(d2 < radius_sq) || (dz == 0 && dy == 0 && dx == 0)) continue;
                const float dot = (oz * c.a[0] + oy * c.a[1]) + ox * c.a[2];
                if (dot >= (cos_half * sqrtf(d2)) * c.norm_a) {
                    const unsigned int v = __ldg(votes + row + dx);
                    if (v > best) {
                        best = v;
                        best_o[0] = oz; best_o[1] = oy; best_o[2] = ox;
                        best_d2 = d2;
                    }
                }
            }
        }
    }
    if (best > 0) {
        const float norm = sqrtf(best_d2);
        for (int i = 0; i < NDIM; ++i) {
            directions[j * NDIM + i] = (short)rintf((best_o[i + 3 - NDIM] / norm) * 32767.0f);
        }
    }
}
