// nvcc-check: -DSELFTEST_OFFSET=0
// Self-test kernels: the smallest kernel module that exercises the loader
// (package data, #define preamble, template instantiation by name_expressions).
//
// ivote_scaled_add<T>: out[i] = a * x[i] + y[i] for i < n, grid-stride loop.
template <typename T>
__global__ void ivote_scaled_add(const T* __restrict__ x, const T* __restrict__ y,
                                 T* __restrict__ out, const T a, const long long n)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)blockDim.x * gridDim.x) {
        out[i] = a * x[i] + y[i] + (T)SELFTEST_OFFSET;
    }
}

#ifdef IVOTE_NVCC_CHECK
template __global__ void ivote_scaled_add<float>(const float*, const float*, float*, const float, const long long);
template __global__ void ivote_scaled_add<double>(const double*, const double*, double*, const double, const long long);
#endif
