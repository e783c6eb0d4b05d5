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
// (two rounds of a 32-bit integer hash -> two 24-bit uniforms -> Box-Muller), so
// no noise array has to be generated, stored and read back. 32-bit arithmetic
// only; indices repeat after 2**32 elements. __host__ too, for a CPU check.
__host__ __device__ inline unsigned int ivote_convrbm_hash32(unsigned int x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

__host__ __device__ inline float ivote_convrbm_normal(unsigned int seed_lo, unsigned int seed_hi, unsigned int index)
{
    unsigned int a = ivote_convrbm_hash32(ivote_convrbm_hash32(index * 0x9E3779B9U + seed_lo) ^ seed_hi);
    unsigned int b = ivote_convrbm_hash32(a + 0x632BE5ABU);
    float u1 = ((float)(a >> 8) + 0.5f) * 5.9604645e-8f;  // (0, 1), 2**-24 steps
    float u2 = ((float)(b >> 8) + 0.5f) * 5.9604645e-8f;
    return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}

// ivote_convrbm_relu_at<T>: one hidden unit (the body of the kernel below, also
// callable on the host for a CPU check of the index arithmetic).
template <typename T>
__host__ __device__ inline T ivote_convrbm_relu_at(T mu, T bias, T given_noise, int noise_mode, unsigned int seed_lo,
                                                   unsigned int seed_hi, unsigned int index)
{
    T m = mu + bias;
    if (noise_mode != 0) {
        T sigm = (T)1 / ((T)1 + exp(-m));
        T normal = noise_mode == 1 ? given_noise : (T)ivote_convrbm_normal(seed_lo, seed_hi, index);
        m += sqrt(sigm) * normal;
    }
    return m > (T)0 ? m : (T)0;
}

// ivote_convrbm_noisy_relu<T, I>:
//   pre-activations mu (n_filters, pz, py, px) without bias:
//   mu' = mu + bias[k]; mean = max(0, mu'); sample = max(0, mu' + sqrt(sigm(mu')) * noise)
//   where (z, y, x) lies in the hidden box [0, bz) x [0, by) x [0, bx), else 0.
//   noise_mode 0: the mean; 1: `noise` holds standard normal numbers (the
//   NumPy reference's); 2: counter-based normals from the seed (training).
//   Launch: threads over (x, y), blockIdx.z strides over n_filters * pz, so no
//   integer division per element. 2D images use pz = bz = 1.
template <typename T, typename I>
__global__ void ivote_convrbm_noisy_relu(const T* __restrict__ mu, const T* __restrict__ bias,
                                         const T* __restrict__ noise, T* __restrict__ sample, int noise_mode,
                                         unsigned int seed_lo, unsigned int seed_hi, int n_filters, int pz, int py,
                                         int px, int bz, int by, int bx)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= px || y >= py) return;
    for (int kz = blockIdx.z; kz < n_filters * pz; kz += gridDim.z) {
        int k = kz / pz;
        int z = kz - k * pz;
        I i = ((I)kz * py + y) * px + x;
        T out = 0;
        if (z < bz && y < by && x < bx) {
            out = ivote_convrbm_relu_at<T>(mu[i], bias[k], noise_mode == 1 ? noise[i] : (T)0, noise_mode, seed_lo,
                                           seed_hi, (unsigned int)i);
        }
        sample[i] = out;
    }
}
