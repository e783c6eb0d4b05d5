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

// ivote_axis_range: the coordinates [*first, *last] along one axis that the
// cone of a voter at `pos` (of n) can reach: the axis-aligned extent of a
// spherical sector of the radius around the direction (component a of length
// norm_a) and half-angle, slightly widened, clipped to the window and to the
// image. Written with non-negative extents and minima only: a driver JIT on the
// device machine miscompiled max(x, -y) on ints (every cone box came out empty).
__device__ __forceinline__ void ivote_axis_range(float a, float norm_a, float half_angle, float radius, float s,
                                                 int window, int pos, int n, int* first, int* last)
{
    const float u = fminf(1.0f, fmaxf(-1.0f, a / norm_a));
    const float alpha = acosf(u);  // angle between the axis and the cone's axis
    const float reach_up = (alpha <= half_angle) ? radius : fmaxf(0.0f, radius * cosf(alpha - half_angle));
    const float reach_down = (alpha + half_angle >= IVOTE_PI_F)
                                 ? radius
                                 : fmaxf(0.0f, radius * cosf(IVOTE_PI_F - (alpha + half_angle)));
    int up = (int)ceilf(reach_up / s + 0.01f);
    int down = (int)ceilf(reach_down / s + 0.01f);
    if (up > window) up = window;
    if (up > n - 1 - pos) up = n - 1 - pos;
    if (down > window) down = window;
    if (down > pos) down = pos;
    *first = pos - down;
    *last = pos + up;
}

// The voter's position and direction (float) and the box around its cone
// (absolute coordinates), shared by the vote and turn kernels. The box is
// slightly conservative; the exact test decides.
struct IvoteCone {
    int z, y, x;
    float az, ay, ax, norm_a;
    int z0, z1, y0, y1, x0, x1;
};

template <int NDIM, typename Index>
__device__ __forceinline__ IvoteCone ivote_cone(Index t, const short* directions, long long j, int Z, int Y, int X,
                                                float sz, float sy, float sx, int wz, int wy, int wx,
                                                float radius, float half_angle)
{
    IvoteCone c;
    c.x = (int)(t % X);
    c.y = (int)((t / X) % Y);
    c.z = (int)(t / ((Index)X * Y));
    c.az = (NDIM == 3) ? (float)directions[j * NDIM] : 0.0f;
    c.ay = (float)directions[j * NDIM + NDIM - 2];
    c.ax = (float)directions[j * NDIM + NDIM - 1];
    c.norm_a = sqrtf((c.az * c.az + c.ay * c.ay) + c.ax * c.ax);
    c.z0 = c.z;
    c.z1 = c.z;
    if (NDIM == 3) ivote_axis_range(c.az, c.norm_a, half_angle, radius, sz, wz, c.z, Z, &c.z0, &c.z1);
    ivote_axis_range(c.ay, c.norm_a, half_angle, radius, sy, wy, c.y, Y, &c.y0, &c.y1);
    ivote_axis_range(c.ax, c.norm_a, half_angle, radius, sx, wx, c.x, X, &c.x0, &c.x1);
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
    const Index t = voters[j];
    const IvoteCone c = ivote_cone<NDIM, Index>(t, directions, j, Z, Y, X, sz, sy, sx, wz, wy, wx, radius, half_angle);
    const unsigned int w = weights[j];
    for (int pz = c.z0; pz <= c.z1; ++pz) {
        const int dz = pz - c.z;
        const float oz = (float)dz * sz;
        for (int py = c.y0; py <= c.y1; ++py) {
            const int dy = py - c.y;
            const float oy = (float)dy * sy;
            const Index row = ((Index)pz * Y + py) * X;
            for (int px = c.x0; px <= c.x1; ++px) {
                const int dx = px - c.x;
                const float ox = (float)dx * sx;
                const float d2 = (oz * oz + oy * oy) + ox * ox;
                if (!(d2 < radius_sq) || (dz == 0 && dy == 0 && dx == 0)) continue;
                const float dot = (oz * c.az + oy * c.ay) + ox * c.ax;
                if (dot >= (cos_half * sqrtf(d2)) * c.norm_a) atomicAdd(votes + row + px, w);
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
    const Index t = voters[j];
    const IvoteCone c = ivote_cone<NDIM, Index>(t, directions, j, Z, Y, X, sz, sy, sx, wz, wy, wx, radius, half_angle);
    unsigned int best = 0;
    float best_oz = 0.0f, best_oy = 0.0f, best_ox = 0.0f, best_d2 = 0.0f;
    for (int pz = c.z0; pz <= c.z1; ++pz) {
        const int dz = pz - c.z;
        const float oz = (float)dz * sz;
        for (int py = c.y0; py <= c.y1; ++py) {
            const int dy = py - c.y;
            const float oy = (float)dy * sy;
            const Index row = ((Index)pz * Y + py) * X;
            for (int px = c.x0; px <= c.x1; ++px) {
                const int dx = px - c.x;
                const float ox = (float)dx * sx;
                const float d2 = (oz * oz + oy * oy) + ox * ox;
                if (!(d2 < radius_sq) || (dz == 0 && dy == 0 && dx == 0)) continue;
                const float dot = (oz * c.az + oy * c.ay) + ox * c.ax;
                if (dot >= (cos_half * sqrtf(d2)) * c.norm_a) {
                    const unsigned int v = __ldg(votes + row + px);
                    if (v > best) {
                        best = v;
                        best_oz = oz;
                        best_oy = oy;
                        best_ox = ox;
                        best_d2 = d2;
                    }
                }
            }
        }
    }
    if (best > 0) {
        const float norm = sqrtf(best_d2);
        if (NDIM == 3) directions[j * NDIM] = (short)rintf((best_oz / norm) * 32767.0f);
        directions[j * NDIM + NDIM - 2] = (short)rintf((best_oy / norm) * 32767.0f);
        directions[j * NDIM + NDIM - 1] = (short)rintf((best_ox / norm) * 32767.0f);
    }
}
