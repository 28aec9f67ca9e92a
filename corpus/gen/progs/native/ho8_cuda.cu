// Held-out set 8's CUDA program (built with nvcc, linked with the static CUDA runtime):
// `ho8_cuda MODE`. strict: checks every call the way cuda-samples' checkCudaErrors does and
// exits on the first error; fallback: no usable GPU -> computes on the CPU and exits 0.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "CUDA error at %s:%d code=%d(%s) \"%s\": %s\n", __FILE__, __LINE__, \
            (int)e_, cudaGetErrorName(e_), #call, cudaGetErrorString(e_)); exit(EXIT_FAILURE); } } while (0)

__global__ void saxpy(int n, float a, const float *x, float *y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "strict";
    int n = 1 << 20, count = 0;
    printf("saxpy benchmark, n=%d\n", n);
    fflush(stdout);
    if (!strcmp(mode, "fallback")) {
        cudaError_t e = cudaGetDeviceCount(&count);
        if (e != cudaSuccess || count == 0) {
            printf("note: no usable CUDA device (%s), running the CPU path\n", cudaGetErrorString(e));
            float *x = (float *)malloc(n * sizeof(float)), *y = (float *)malloc(n * sizeof(float));
            for (int i = 0; i < n; i++) { x[i] = 1.0f; y[i] = 2.0f; }
            for (int i = 0; i < n; i++) y[i] = 3.0f * x[i] + y[i];
            printf("max error: %f\n", y[0] - 5.0f);
            printf("done (cpu)\n");
            return 0;
        }
    }
    CHECK(cudaGetDeviceCount(&count));
    printf("%d CUDA device(s)\n", count);
    float *x, *y;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&y, n * sizeof(float)));
    saxpy<<<(n + 255) / 256, 256>>>(n, 2.0f, x, y);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    printf("done\n");
    return 0;
}
