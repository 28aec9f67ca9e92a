// cuda_error in plain CUDA C (expected: cuda_error). Built by reproduce.py with nvcc.
//   oob illegal_address  a kernel whose stride sends its writes far past the buffer
//   oob invalid_config   a launch with more threads per block than the GPU allows
// Errors are checked the way many programs do: a macro printing cudaGetErrorString, exit 1.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CHECK(call)                                                                   \
    do {                                                                              \
        cudaError_t err_ = (call);                                                    \
        if (err_ != cudaSuccess) {                                                    \
            fprintf(stderr, "CUDA error at %s:%d: %s (%s)\n", __FILE__, __LINE__,     \
                    cudaGetErrorString(err_), cudaGetErrorName(err_));                \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

__global__ void scatter(float *out, long long stride, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[(long long)i * stride] = 1.0f;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "illegal_address";
    float *buf = nullptr;
    CHECK(cudaMalloc(&buf, 256 * sizeof(float)));
    if (strcmp(mode, "illegal_address") == 0) {
        printf("launching scatter with a stride of 2**36 elements over 256 floats\n");
        fflush(stdout);
        scatter<<<4, 256>>>(buf, 1LL << 36, 1024);
    } else if (strcmp(mode, "invalid_config") == 0) {
        printf("launching scatter with 4096 threads per block\n");
        fflush(stdout);
        scatter<<<1, 4096>>>(buf, 1, 256);
    } else {
        fprintf(stderr, "usage: %s illegal_address|invalid_config\n", argv[0]);
        return 2;
    }
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(buf));
    printf("done\n");
    return 0;
}
