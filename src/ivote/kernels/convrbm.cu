// Convolutional RBM trained in the frequency domain (Brosch & Tam 2015).
//
// Spectra are channels-first and flattened over the frequencies: a filter bank
// is (n_filters, n_channels, n_freq), visible spectra (n_channels, n_freq),
// hidden spectra (n_filters, n_freq). T is float or double; complex numbers are
// ivote_complex<T> (the layout of complex64/complex128 arrays); I is the index
// type (int below 2**31 bytes, else long long), chosen by the launcher.
// Each thread owns one output element and reads along the contiguous frequency
// axis, so all loads are coalesced; the filter bank is read once per call.

template <typename T>
struct alignas(2 * sizeof(T)) ivote_complex {
    T x;
    T y;
};

// ivote_convrbm_hidden_spectrum<T, I>:
//   hidden[k, f] = sum_c conj(filters[k, c, f]) * visible[c, f]
// (correlation = product with the conjugate spectrum).
template <typename T, typename I>
__global__ void ivote_convrbm_hidden_spectrum(const ivote_complex<T>* __restrict__ filters, const ivote_complex<T>* __restrict__ visible,
                                              ivote_complex<T>* __restrict__ hidden, int n_filters, int n_channels, I n_freq)
{
    I i = (I)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (I)n_filters * n_freq) return;
    I k = i / n_freq;
    I f = i - k * n_freq;
    const ivote_complex<T>* w = filters + k * n_channels * n_freq + f;
    const ivote_complex<T>* v = visible + f;
    T re = 0, im = 0;
    for (int c = 0; c < n_channels; ++c) {
        ivote_complex<T> a = w[(I)c * n_freq];
        ivote_complex<T> b = v[(I)c * n_freq];
        re += a.x * b.x + a.y * b.y;
        im += a.x * b.y - a.y * b.x;
    }
    ivote_complex<T> out;
    out.x = re;
    out.y = im;
    hidden[i] = out;
}

// ivote_convrbm_visible_spectrum<T, I>:
//   visible[c, f] = sum_k filters[k, c, f] * hidden[k, f]
// (the transposed operation: convolution = product with the spectrum itself).
template <typename T, typename I>
__global__ void ivote_convrbm_visible_spectrum(const ivote_complex<T>* __restrict__ filters, const ivote_complex<T>* __restrict__ hidden,
                                               ivote_complex<T>* __restrict__ visible, int n_filters, int n_channels, I n_freq)
{
    I i = (I)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (I)n_channels * n_freq) return;
    I c = i / n_freq;
    I f = i - c * n_freq;
    T re = 0, im = 0;
    for (int k = 0; k < n_filters; ++k) {
        ivote_complex<T> a = filters[((I)k * n_channels + c) * n_freq + f];
        ivote_complex<T> b = hidden[(I)k * n_freq + f];
        re += a.x * b.x - a.y * b.y;
        im += a.x * b.y + a.y * b.x;
    }
    ivote_complex<T> out;
    out.x = re;
    out.y = im;
    visible[i] = out;
}

// ivote_convrbm_accumulate_gradient<T, I>:
//   gradient[k, c, f] += conj(h0[k, f]) * v0[c, f] - conj(h1[k, f]) * v1[c, f]
// (positive minus negative phase of CD-1, summed over a mini-batch in the
// frequency domain; cropped to the filter size once per mini-batch).
template <typename T, typename I>
__global__ void ivote_convrbm_accumulate_gradient(ivote_complex<T>* __restrict__ gradient, const ivote_complex<T>* __restrict__ h0,
                                                  const ivote_complex<T>* __restrict__ v0, const ivote_complex<T>* __restrict__ h1,
                                                  const ivote_complex<T>* __restrict__ v1, int n_filters, int n_channels,
                                                  I n_freq)
{
    I i = (I)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (I)n_filters * n_channels * n_freq) return;
    I f = i % n_freq;
    I kc = i / n_freq;
    I c = kc % n_channels;
    I k = kc / n_channels;
    ivote_complex<T> a0 = h0[k * n_freq + f], b0 = v0[c * n_freq + f];
    ivote_complex<T> a1 = h1[k * n_freq + f], b1 = v1[c * n_freq + f];
    ivote_complex<T> g = gradient[i];
    g.x += (a0.x * b0.x + a0.y * b0.y) - (a1.x * b1.x + a1.y * b1.y);
    g.y += (a0.x * b0.y - a0.y * b0.x) - (a1.x * b1.y - a1.y * b1.x);
    gradient[i] = g;
}

// ivote_convrbm_normal: a standard normal number from (seed, index), counter-based
// (SplitMix64 hash -> two 24-bit uniforms -> Box-Muller), so no noise array has
// to be generated, stored and read back. __host__ too, for a CPU check.
__host__ __device__ inline unsigned long long ivote_convrbm_splitmix64(unsigned long long x)
{
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

__host__ __device__ inline float ivote_convrbm_normal(unsigned long long seed, unsigned long long index)
{
    unsigned long long bits = ivote_convrbm_splitmix64(seed ^ ivote_convrbm_splitmix64(index));
    float u1 = ((float)(bits >> 40) + 0.5f) * 5.9604645e-8f;  // (0, 1), 2**-24 steps
    float u2 = ((float)(bits & 0xFFFFFFULL) + 0.5f) * 5.9604645e-8f;
    return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}

// ivote_convrbm_noisy_relu<T, I>:
//   in place on pre-activations mu (n_filters, pz, py, px) without bias:
//   mu' = mu + bias[k]; mean = max(0, mu'); sample = max(0, mu' + sqrt(sigm(mu')) * noise)
//   where (z, y, x) lies in the hidden box [0, bz) x [0, by) x [0, bx), else 0.
//   noise_mode 0: the mean; 1: `noise` holds standard normal numbers (the
//   NumPy reference's); 2: counter-based normals from `seed` (training).
//   2D images use pz = bz = 1.
template <typename T, typename I>
__global__ void ivote_convrbm_noisy_relu(const T* __restrict__ mu, const T* __restrict__ bias,
                                         const T* __restrict__ noise, T* __restrict__ sample, int noise_mode,
                                         unsigned long long seed, int n_filters, int pz, int py, int px, int bz,
                                         int by, int bx)
{
    I i = (I)blockIdx.x * blockDim.x + threadIdx.x;
    I plane = (I)py * px;
    I volume = (I)pz * plane;
    if (i >= (I)n_filters * volume) return;
    I k = i / volume;
    I r = i - k * volume;
    int z = (int)(r / plane);
    r -= (I)z * plane;
    int y = (int)(r / px);
    int x = (int)(r - (I)y * px);
    T out = 0;
    if (z < bz && y < by && x < bx) {
        T m = mu[i] + bias[k];
        if (noise_mode != 0) {
            T sigm = (T)1 / ((T)1 + exp(-m));
            T normal = noise_mode == 1 ? noise[i] : (T)ivote_convrbm_normal(seed, (unsigned long long)i);
            m += sqrt(sigm) * normal;
        }
        out = m > (T)0 ? m : (T)0;
    }
    sample[i] = out;
}
