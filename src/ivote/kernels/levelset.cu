// napari-ivote: many interacting level sets (Ali & Madabhushi 2011, 2012), one box per object.
//
// All objects' boxes are stacked as phi[n_objects][bz][by][bx] (2D: bz = 1). One launch of
// ivote_levelset_step advances every object by one explicit iteration; the grid is
// (object, tile) and each block owns one tile of one object's box.
//
// Buffers rotate with the iteration k (the caller passes the pointers):
//   canvas_in   = sum over objects of the compact Heaviside of phi^k, image-sized (read)
//   canvas_out  = the same sum for phi^(k+1), accumulated here with atomics (zeroed by launch k-1)
//   canvas_zero = the buffer launch k+1 accumulates into: zeroed here at every box cell
//   sums_in/out/zero: per object (sum of H(phi) I, sum of H(phi)) over valid cells, same rotation
// so an iteration is a single launch, with no host round trip, and it replays as a CUDA graph.
// The NumPy reference (ivote/segment/_reference.py) evaluates the same formulas.

#define IVOTE_PI 3.14159265358979f
#define IVOTE_MAX_POSE 32

// coef[]: lambda1, lambda2, mu, beta, omega, eps, dt, kappa_max, hz, hy, hx, extent
// dims[]: bz, by, bx, iz, iy, ix, tiles_z, tiles_y, tiles_x, grid_size T, n_modes K, pose size P

__device__ __forceinline__ float ivote_heaviside(float phi, float eps) {
    return 0.5f + atanf(phi / eps) / IVOTE_PI;
}

__device__ __forceinline__ float ivote_dirac(float phi, float eps) {
    return (eps / IVOTE_PI) / (eps * eps + phi * phi);
}

__device__ __forceinline__ float ivote_heaviside_compact(float phi, float eps) {
    if (phi <= -eps) return 0.0f;
    if (phi >= eps) return 1.0f;
    return 0.5f * (1.0f + phi / eps + sinf(IVOTE_PI * phi / eps) / IVOTE_PI);
}

// ivote_levelset_prior: the object's fitted prior SDF at box-centred physical position rel[]:
// u = R^T rel / s, multilinear interpolation of (mean + sum_k w_k mode_k) on the canonical grid
// (clamped coordinates), times s. Same tap order as _shape_prior.prior_sdf.
template <int NDIM>
__device__ __forceinline__ float ivote_levelset_prior(const float* rel, const float* pose,
                                                      const float* __restrict__ templates,
                                                      int T, int K, float extent) {
    const float* R = pose + NDIM;
    const float s = pose[NDIM + NDIM * NDIM];
    const float* w = pose + NDIM + NDIM * NDIM + 1;
    const float inv_step = (float)(T - 1) / (2.0f * extent);
    int lower[NDIM];
    float frac[NDIM];
#pragma unroll
    for (int j = 0; j < NDIM; ++j) {
        float u = 0.0f;
#pragma unroll
        for (int i = 0; i < NDIM; ++i) u += R[i * NDIM + j] * rel[i];
        u = u / s;
        float g = fminf(fmaxf((u + extent) * inv_step, 0.0f), (float)(T - 1));
        int i0 = min((int)floorf(g), T - 2);
        lower[j] = i0;
        frac[j] = g - (float)i0;
    }
    int n_cells = T * T;
    if (NDIM == 3) n_cells *= T;
    float value = 0.0f;
#pragma unroll
    for (int corner = 0; corner < (1 << NDIM); ++corner) {
        int offset = 0;
        float tap_weight = 1.0f;
#pragma unroll
        for (int j = 0; j < NDIM; ++j) {
            const int bit = (corner >> (NDIM - 1 - j)) & 1;
            offset = offset * T + lower[j] + bit;
            tap_weight = tap_weight * (bit ? frac[j] : (1.0f - frac[j]));
        }
        float tap = __ldg(templates + offset);
        for (int k = 1; k <= K; ++k) tap = tap + w[k - 1] * __ldg(templates + k * n_cells + offset);
        value = value + tap_weight * tap;
    }
    return value * s;
}

// ivote_levelset_step<NDIM, TZ, TY, TX, IndexT>: one fused iteration for every object.
// Loads a TZ x TY x TX tile of phi plus a one-cell halo (edge-replicated at the box border) into
// shared memory, computes the curvature with cross-derivatives, the Chan-Vese region force (means
// from sums_in), the shape-prior force and the overlap force (canvas_in), writes phi^(k+1) once,
// and accumulates canvas_out and sums_out (block reduction, one atomic per block and quantity).
// prime != 0: copy phi and accumulate only (after a reinitialisation).
template <int NDIM, int TZ, int TY, int TX, typename IndexT>
__global__ void __launch_bounds__(TZ * TY * TX)
ivote_levelset_step(const float* __restrict__ phi_in, float* __restrict__ phi_out,
                    const float* __restrict__ image,
                    const float* __restrict__ canvas_in, float* __restrict__ canvas_out,
                    float* __restrict__ canvas_zero,
                    const float* __restrict__ sums_in, float* __restrict__ sums_out,
                    float* __restrict__ sums_zero,
                    const float* __restrict__ region_consts, const int* __restrict__ origins,
                    const float* __restrict__ pose, const float* __restrict__ templates,
                    const float* __restrict__ coef, const int* __restrict__ dims, const int prime) {
    constexpr int HZ = (NDIM == 3) ? 1 : 0;
    constexpr int SZ = TZ + 2 * HZ, SY = TY + 2, SX = TX + 2;
    constexpr int NT = TZ * TY * TX;
    __shared__ float tile[SZ][SY][SX];
    __shared__ float sh_pose[IVOTE_MAX_POSE];
    __shared__ float red[2][NT / 32];

    const int obj = blockIdx.x;
    const int bz = dims[0], by = dims[1], bx = dims[2];
    const int iz = dims[3], iy = dims[4], ix = dims[5];
    const int tiles_y = dims[7], tiles_x = dims[8];
    const int T = dims[9], K = dims[10], P = dims[11];
    const int t = blockIdx.y;
    const int x0 = (t % tiles_x) * TX;
    const int y0 = ((t / tiles_x) % tiles_y) * TY;
    const int z0 = (t / (tiles_x * tiles_y)) * TZ;
    const int tid = threadIdx.x + TX * (threadIdx.y + TY * threadIdx.z);
    const IndexT box_cells = (IndexT)bz * by * bx;
    const float* phi_box = phi_in + (IndexT)obj * box_cells;

    for (int i = tid; i < SZ * SY * SX; i += NT) {
        const int sx = i % SX, sy = (i / SX) % SY, sz = i / (SX * SY);
        const int z = min(max(z0 - HZ + sz, 0), bz - 1);
        const int y = min(max(y0 - 1 + sy, 0), by - 1);
        const int x = min(max(x0 - 1 + sx, 0), bx - 1);
        tile[sz][sy][sx] = phi_box[((IndexT)z * by + y) * bx + x];
    }
    for (int i = tid; i < P; i += NT) sh_pose[i] = pose[(IndexT)obj * P + i];
    __syncthreads();

    const int lx = threadIdx.x, ly = threadIdx.y, lz = threadIdx.z;
    const int x = x0 + lx, y = y0 + ly, z = z0 + lz;
    float acc_hi = 0.0f, acc_h = 0.0f;
    if (x < bx && y < by && z < bz) {
        const float eps = coef[5];
        const int cz = lz + HZ, cy = ly + 1, cx = lx + 1;
        const float phi = tile[cz][cy][cx];
        const int gz = origins[3 * obj] + z, gy = origins[3 * obj + 1] + y, gx = origins[3 * obj + 2] + x;
        const bool valid = gz >= 0 && gz < iz && gy >= 0 && gy < iy && gx >= 0 && gx < ix;
        const IndexT gidx = valid ? ((IndexT)gz * iy + gy) * ix + gx : (IndexT)0;
        const bool border = x == 0 || x == bx - 1 || y == 0 || y == by - 1 ||
                            (NDIM == 3 && (z == 0 || z == bz - 1));
        const float value = valid ? __ldg(image + gidx) : 0.0f;
        float next = phi;
        if (!prime && valid && !border) {
            const float hz = coef[8], hy = coef[9], hx = coef[10];
            // first and second derivatives, cross terms (the mean curvature numerator)
            const float xm = tile[cz][cy][cx - 1], xp = tile[cz][cy][cx + 1];
            const float ym = tile[cz][cy - 1][cx], yp = tile[cz][cy + 1][cx];
            const float px = (xp - xm) / (2.0f * hx), py = (yp - ym) / (2.0f * hy);
            const float pxx = (xp - 2.0f * phi + xm) / (hx * hx);
            const float pyy = (yp - 2.0f * phi + ym) / (hy * hy);
            const float pyx = (tile[cz][cy + 1][cx + 1] - tile[cz][cy + 1][cx - 1] -
                               tile[cz][cy - 1][cx + 1] + tile[cz][cy - 1][cx - 1]) / (4.0f * hy * hx);
            float g2, num;
            if (NDIM == 3) {
                const float zm = tile[cz - HZ][cy][cx], zp = tile[cz + HZ][cy][cx];
                const float pz = (zp - zm) / (2.0f * hz);
                const float pzz = (zp - 2.0f * phi + zm) / (hz * hz);
                const float pzy = (tile[cz + HZ][cy + 1][cx] - tile[cz + HZ][cy - 1][cx] -
                                   tile[cz - HZ][cy + 1][cx] + tile[cz - HZ][cy - 1][cx]) / (4.0f * hz * hy);
                const float pzx = (tile[cz + HZ][cy][cx + 1] - tile[cz + HZ][cy][cx - 1] -
                                   tile[cz - HZ][cy][cx + 1] + tile[cz - HZ][cy][cx - 1]) / (4.0f * hz * hx);
                g2 = pz * pz + py * py + px * px;
                num = pzz * (g2 - pz * pz) + pyy * (g2 - py * py) + pxx * (g2 - px * px);
                num = num - 2.0f * pz * py * pzy;
                num = num - 2.0f * pz * px * pzx;
                num = num - 2.0f * py * px * pyx;
            } else {
                g2 = py * py + px * px;
                num = pyy * (g2 - py * py) + pxx * (g2 - px * px);
                num = num - 2.0f * py * px * pyx;
            }
            const float g2e = g2 + 1e-6f;
            const float kappa_max = coef[7];
            const float kappa = fminf(fmaxf(num / (g2e * sqrtf(g2e)), -kappa_max), kappa_max);
            // Chan-Vese region force from the means of phi^k
            const float s_hi = sums_in[2 * obj], s_h = sums_in[2 * obj + 1];
            const float c_in = s_hi / fmaxf(s_h, 1e-6f);
            const float c_out = (region_consts[2 * obj] - s_hi) / fmaxf(region_consts[2 * obj + 1] - s_h, 1e-6f);
            // divided by the object's contrast (c_in - c_out)^2 >= 0.05^2, clipped to +-max(l1, l2)
            const float contrast = fmaxf((c_in - c_out) * (c_in - c_out), 0.0025f);
            const float region_max = fmaxf(coef[0], coef[1]);
            float region = (-coef[0] * (value - c_in) * (value - c_in) + coef[1] * (value - c_out) * (value - c_out)) / contrast;
            region = fminf(fmaxf(region, -region_max), region_max);
            // shape prior
            float rel[NDIM];
            if (NDIM == 3) {
                rel[0] = ((float)z - 0.5f * (float)(bz - 1)) * hz - sh_pose[0];
                rel[1] = ((float)y - 0.5f * (float)(by - 1)) * hy - sh_pose[1];
                rel[NDIM - 1] = ((float)x - 0.5f * (float)(bx - 1)) * hx - sh_pose[NDIM - 1];
            } else {
                rel[0] = ((float)y - 0.5f * (float)(by - 1)) * hy - sh_pose[0];
                rel[NDIM - 1] = ((float)x - 0.5f * (float)(bx - 1)) * hx - sh_pose[NDIM - 1];
            }
            const float psi = ivote_levelset_prior<NDIM>(rel, sh_pose, templates, T, K, coef[11]);
            const float shape = fminf(fmaxf(psi - phi, -1.0f), 1.0f);
            // overlap with every other object
            const float others = fminf(fmaxf(canvas_in[gidx] - ivote_heaviside_compact(phi, eps), 0.0f), 1.0f);
            const float force = coef[2] * kappa + region + coef[3] * shape - coef[4] * others;
            next = phi + coef[6] * ivote_dirac(phi, eps) * force;
        }
        phi_out[(IndexT)obj * box_cells + ((IndexT)z * by + y) * bx + x] = next;
        if (valid) {
            canvas_zero[gidx] = 0.0f;
            const float hc = ivote_heaviside_compact(next, eps);
            if (hc > 0.0f) atomicAdd(canvas_out + gidx, hc);
            const float h = ivote_heaviside(next, eps);
            acc_hi = h * value;
            acc_h = h;
        }
    }
    // block reduction of the region sums of phi^(k+1): warp shuffles, then one warp
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        acc_hi += __shfl_down_sync(0xffffffffu, acc_hi, offset);
        acc_h += __shfl_down_sync(0xffffffffu, acc_h, offset);
    }
    if ((tid & 31) == 0) {
        red[0][tid >> 5] = acc_hi;
        red[1][tid >> 5] = acc_h;
    }
    __syncthreads();
    if (tid < 32) {
        acc_hi = tid < NT / 32 ? red[0][tid] : 0.0f;
        acc_h = tid < NT / 32 ? red[1][tid] : 0.0f;
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) {
            acc_hi += __shfl_down_sync(0xffffffffu, acc_hi, offset);
            acc_h += __shfl_down_sync(0xffffffffu, acc_h, offset);
        }
        if (tid == 0) {
            atomicAdd(sums_out + 2 * obj, acc_hi);
            atomicAdd(sums_out + 2 * obj + 1, acc_h);
            if (t == 0) {
                sums_zero[2 * obj] = 0.0f;
                sums_zero[2 * obj + 1] = 0.0f;
            }
        }
    }
}
