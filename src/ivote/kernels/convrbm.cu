// Convolutional RBM trained in the frequency domain (Brosch & Tam 2015).
//
// Spectra are channels-first and flattened over the frequencies: a filter bank
// is (n_filters, n_channels, n_freq), visible spectra (n_channels, n_freq),
// hidden spectra (n_filters, n_freq). T is float or double; complex numbers are
// ivote_complex<T> (the layout of complex64/complex128 arrays); I is the index
// type (int below 2**31 bytes, else long long), chosen by the launcher.
// The spectral kernels put threads on frequencies (blockIdx.x, threadIdx.x) and
// filters / channels on blockIdx.y and z, so every load runs along the
// contiguous frequency axis (coalesced) and no integer division is needed.
// `scale` multiplies the products: the launcher folds the 1/N of the inverse
// FFT into it, so the inverse FFT runs unnormalised (saves a pass over the maps).

template <typename T>
struct alignas(2 * sizeof(T)) ivote_complex {
    T x;
    T y;
};

// ivote_convrbm_hidden_spectrum<T, I>:
//   hidden[k, f] = scale * sum_c conj(filters[k, c, f]) * visible[c, f]
// (correlation = product with the conjugate spectrum).
// Launch: grid (ceil(n_freq / block), 1, ceil(n_filters / k_per)); a thread
// does filters [blockIdx.z * k_per, + k_per).
template <typename T, typename I>
__global__ void ivote_convrbm_hidden_spectrum(const ivote_complex<T>* __restrict__ filters, const ivote_complex<T>* __restrict__ visible,
                                              ivote_complex<T>* __restrict__ hidden, int n_filters, int n_channels, I n_freq,
                                              int k_per, T scale)
{
    I f = (I)blockIdx.x * blockDim.x + threadIdx.x;
    if (f >= n_freq) return;
    int k0 = blockIdx.z * k_per;
    int k1 = k0 + k_per < n_filters ? k0 + k_per : n_filters;
    if (n_channels == 1) {
        ivote_complex<T> b = visible[f];
        b.x *= scale;
        b.y *= scale;
        for (int k = k0; k < k1; ++k) {
            ivote_complex<T> a = filters[(I)k * n_freq + f];
            ivote_complex<T> out;
            out.x = a.x * b.x + a.y * b.y;
            out.y = a.x * b.y - a.y * b.x;
            hidden[(I)k * n_freq + f] = out;
        }
        return;
    }
    for (int k = k0; k < k1; ++k) {
        const ivote_complex<T>* w = filters + (I)k * n_channels * n_freq + f;
        const ivote_complex<T>* v = visible + f;
        T re = 0, im = 0;
        for (int c = 0; c < n_channels; ++c) {
            ivote_complex<T> a = w[(I)c * n_freq];
            ivote_complex<T> b = v[(I)c * n_freq];
            re += a.x * b.x + a.y * b.y;
            im += a.x * b.y - a.y * b.x;
        }
        ivote_complex<T> out;
        out.x = re * scale;
        out.y = im * scale;
        hidden[(I)k * n_freq + f] = out;
    }
}

// ivote_convrbm_visible_spectrum<T, I>:
//   visible[c, f] = scale * sum_k filters[k, c, f] * hidden[k, f]
// (the transposed operation: convolution = product with the spectrum itself).
// Launch: grid (ceil(n_freq / block), n_channels).
template <typename T, typename I>
__global__ void ivote_convrbm_visible_spectrum(const ivote_complex<T>* __restrict__ filters, const ivote_complex<T>* __restrict__ hidden,
                                               ivote_complex<T>* __restrict__ visible, int n_filters, int n_channels, I n_freq,
                                               T scale)
{
    I f = (I)blockIdx.x * blockDim.x + threadIdx.x;
    if (f >= n_freq) return;
    int c = blockIdx.y;
    T re = 0, im = 0;
    for (int k = 0; k < n_filters; ++k) {
        ivote_complex<T> a = filters[((I)k * n_channels + c) * n_freq + f];
        ivote_complex<T> b = hidden[(I)k * n_freq + f];
        re += a.x * b.x - a.y * b.y;
        im += a.x * b.y + a.y * b.x;
    }
    ivote_complex<T> out;
    out.x = re * scale;
    out.y = im * scale;
    visible[(I)c * n_freq + f] = out;
}

// ivote_convrbm_accumulate_gradient<T, I>:
//   gradient[k, c, f] += conj(h0[k, f]) * v0[c, f] - conj(h1[k, f]) * v1[c, f]
// (positive minus negative phase of CD-1, summed over a mini-batch in the
// frequency domain; cropped to the filter size once per mini-batch).
// Launch: grid (ceil(n_freq / block), n_channels, min(n_filters, 65535)): one
// thread per element, neighbouring blocks stream through neighbouring memory
// (v0 and v1 are small and come from L2).
template <typename T, typename I>
__global__ void ivote_convrbm_accumulate_gradient(ivote_complex<T>* __restrict__ gradient, const ivote_complex<T>* __restrict__ h0,
                                                  const ivote_complex<T>* __restrict__ v0, const ivote_complex<T>* __restrict__ h1,
                                                  const ivote_complex<T>* __restrict__ v1, int n_filters, int n_channels,
                                                  I n_freq)
{
    I f = (I)blockIdx.x * blockDim.x + threadIdx.x;
    if (f >= n_freq) return;
    int c = blockIdx.y;
    ivote_complex<T> b0 = v0[(I)c * n_freq + f], b1 = v1[(I)c * n_freq + f];
    for (int k = blockIdx.z; k < n_filters; k += gridDim.z) {
        I i = ((I)k * n_channels + c) * n_freq + f;
        ivote_complex<T> a0 = h0[(I)k * n_freq + f], a1 = h1[(I)k * n_freq + f];
        ivote_complex<T> g = gradient[i];
        g.x += (a0.x * b0.x + a0.y * b0.y) - (a1.x * b1.x + a1.y * b1.y);
        g.y += (a0.x * b0.y - a0.y * b0.x) - (a1.x * b1.y - a1.y * b1.x);
        gradient[i] = g;
    }
}

// ivote_convrbm_normal_pair: two independent standard normal numbers from
// (seed, pair), counter-based (two rounds of a 32-bit integer hash -> two
// 24-bit uniforms -> Box-Muller, both the cosine and the sine branch), so no
// noise array has to be generated, stored and read back. Element i of a map
// uses pair i / 2 (cosine for even i, sine for odd i); pairs repeat after 2**32.
// Fast intrinsics on the device (the noise only needs to be a good sample).
__host__ __device__ inline unsigned int ivote_convrbm_hash32(unsigned int x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

__host__ __device__ inline void ivote_convrbm_normal_pair(unsigned int seed_lo, unsigned int seed_hi, unsigned int pair,
                                                          float* even, float* odd)
{
    unsigned int a = ivote_convrbm_hash32(ivote_convrbm_hash32(pair * 0x9E3779B9U + seed_lo) ^ seed_hi);
    unsigned int b = ivote_convrbm_hash32(a + 0x632BE5ABU);
    float u1 = ((float)(a >> 8) + 0.5f) * 5.9604645e-8f;  // (0, 1), 2**-24 steps
    float u2 = ((float)(b >> 8) + 0.5f) * 5.9604645e-8f;
    float angle = 6.28318531f * u2 - 3.14159265f;  // (-pi, pi): the range of __sincosf's accuracy
#ifdef __CUDA_ARCH__
    float r = sqrtf(-2.0f * __logf(u1));
    float s, c;
    __sincosf(angle, &s, &c);
#else
    float r = sqrtf(-2.0f * logf(u1));
    float s = sinf(angle), c = cosf(angle);
#endif
    *even = r * c;
    *odd = r * s;
}

// sqrt(sigm(m)) = 1 / sqrt(1 + exp(-m)): one fast exponential and one
// reciprocal square root in float (exp(-m) = inf gives 0, no NaN); exact in double.
__device__ inline float ivote_convrbm_sqrt_sigmoid(float m) { return rsqrtf(1.0f + __expf(-m)); }
__device__ inline double ivote_convrbm_sqrt_sigmoid(double m) { return 1.0 / sqrt(1.0 + exp(-m)); }

// V consecutive values, loaded and stored as one vector (16 bytes for V = 4 floats or 2 doubles).
template <typename T, int V>
struct alignas(sizeof(T) * V) ivote_convrbm_vec {
    T v[V];
};

// ivote_convrbm_noisy_relu<T, I, V>:
//   pre-activations mu (n_filters, pz, py, px) without bias:
//   mu' = mu + bias[k]; mean = max(0, mu'); sample = max(0, mu' + sqrt(sigm(mu')) * noise)
//   where (z, y, x) lies in the hidden box [0, bz) x [0, by) x [0, bx), else 0
//   (mu is not read outside the box).
//   noise_mode 0: the mean; 1: `noise` holds standard normal numbers (the
//   NumPy reference's); 2: counter-based normals from the seed (training).
//   Launch: a thread owns V consecutive elements of one (k, z) plane (px % V == 0,
//   V even or 1, 16-byte aligned arrays when V > 1): grid (ceil(py * px / V / block),
//   min(n_filters * pz, 65535)), blockIdx.y strides over the planes. 2D images use
//   pz = bz = 1.
template <typename T, typename I, int V>
__global__ void ivote_convrbm_noisy_relu(const T* __restrict__ mu, const T* __restrict__ bias,
                                         const T* __restrict__ noise, T* __restrict__ sample, int noise_mode,
                                         unsigned int seed_lo, unsigned int seed_hi, int n_filters, int pz, int py,
                                         int px, int bz, int by, int bx)
{
    typedef ivote_convrbm_vec<T, V> vec;
    int e = (blockIdx.x * blockDim.x + threadIdx.x) * V;  // element in the plane
    if (e >= py * px) return;
    int y = e / px;
    int x = e - y * px;
    for (int kz = blockIdx.y; kz < n_filters * pz; kz += gridDim.y) {
        int k = kz / pz;
        int z = kz - k * pz;
        I i = (I)kz * py * px + e;
        vec out;
        if (z < bz && y < by && x < bx) {
            vec m = *reinterpret_cast<const vec*>(mu + i);
            vec n;
            if (noise_mode == 1) n = *reinterpret_cast<const vec*>(noise + i);
            if (noise_mode == 2) {
#pragma unroll
                for (int v = 0; v < V; v += 2) {
                    float even, odd;
                    ivote_convrbm_normal_pair(seed_lo, seed_hi, (unsigned int)((i + v) >> 1), &even, &odd);
                    if (V == 1) {
                        n.v[0] = (T)((i & 1) ? odd : even);
                    } else {
                        n.v[v] = (T)even;
                        n.v[V == 1 ? 0 : v + 1] = (T)odd;
                    }
                }
            }
            T b = bias[k];
#pragma unroll
            for (int v = 0; v < V; ++v) {
                T h = m.v[v] + b;
                if (noise_mode != 0) h += ivote_convrbm_sqrt_sigmoid(h) * n.v[v];
                out.v[v] = (x + v < bx && h > (T)0) ? h : (T)0;
            }
        } else {
#pragma unroll
            for (int v = 0; v < V; ++v) out.v[v] = (T)0;
        }
        *reinterpret_cast<vec*>(sample + i) = out;
    }
}

#ifdef IVOTE_NVCC_CHECK
#define IVOTE_CONVRBM_INSTANTIATE(T, I)                                                                            \
    template __global__ void ivote_convrbm_hidden_spectrum<T, I>(const ivote_complex<T>*, const ivote_complex<T>*, \
                                                                 ivote_complex<T>*, int, int, I, int, T);          \
    template __global__ void ivote_convrbm_visible_spectrum<T, I>(const ivote_complex<T>*, const ivote_complex<T>*, \
                                                                  ivote_complex<T>*, int, int, I, T);               \
    template __global__ void ivote_convrbm_accumulate_gradient<T, I>(ivote_complex<T>*, const ivote_complex<T>*,   \
                                                                     const ivote_complex<T>*, const ivote_complex<T>*, \
                                                                     const ivote_complex<T>*, int, int, I);           \
    template __global__ void ivote_convrbm_noisy_relu<T, I, 1>(const T*, const T*, const T*, T*, int, unsigned int, \
                                                               unsigned int, int, int, int, int, int, int, int);
IVOTE_CONVRBM_INSTANTIATE(float, int)
IVOTE_CONVRBM_INSTANTIATE(float, long long)
IVOTE_CONVRBM_INSTANTIATE(double, int)
IVOTE_CONVRBM_INSTANTIATE(double, long long)
template __global__ void ivote_convrbm_noisy_relu<float, int, 4>(const float*, const float*, const float*, float*, int,
                                                                 unsigned int, unsigned int, int, int, int, int, int,
                                                                 int, int);
template __global__ void ivote_convrbm_noisy_relu<float, long long, 4>(const float*, const float*, const float*, float*,
                                                                       int, unsigned int, unsigned int, int, int, int,
                                                                       int, int, int, int);
template __global__ void ivote_convrbm_noisy_relu<double, int, 2>(const double*, const double*, const double*, double*,
                                                                  int, unsigned int, unsigned int, int, int, int, int,
                                                                  int, int, int);
#endif
