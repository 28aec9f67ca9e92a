"""cuda_error through CuPy's RawKernel (expected: cuda_error).

Modes: `illegal_address` (a kernel whose stride sends its writes far past the buffer: an illegal
memory access, reported at the next synchronisation) and `invalid_config` (a launch with more
threads per block than the GPU allows)."""

from __future__ import annotations

import sys

from _common import cpu_half_banner, parser, say

SRC = r"""
extern "C" __global__ void scatter(float *out, long long stride, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[(long long)i * stride] = 1.0f;
}
"""


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--mode", choices=("illegal_address", "invalid_config"),
                   default="illegal_address")
    a = p.parse_args()
    if a.cpu_half:
        cpu_half_banner(f"cuda_error/cupy/{a.mode}", ("cupy",))
        say("no CPU variant: CuPy kernels need a GPU")
        return 0
    import cupy as cp

    kernel = cp.RawKernel(SRC, "scatter")
    out = cp.zeros(256, dtype=cp.float32)
    if a.mode == "illegal_address":
        say("launching scatter with a stride of 2**36 elements over a 256-element buffer")
        kernel((4,), (256,), (out, cp.int64(1 << 36), cp.int32(1024)))
    else:
        say("launching scatter with 4096 threads per block")
        kernel((1,), (4096,), (out, cp.int64(1), cp.int32(256)))
    cp.cuda.Device().synchronize()
    say(f"sum {float(out.sum())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
