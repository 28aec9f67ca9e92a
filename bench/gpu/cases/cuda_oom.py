"""cuda_oom: allocate past the GPU's memory with PyTorch, JAX or CuPy (expected: cuda_oom)."""

from __future__ import annotations

import sys

from _common import cpu_half_banner, parser, say


def torch_oom() -> int:
    import torch

    total = torch.cuda.get_device_properties(0).total_memory
    say(f"{torch.cuda.get_device_name(0)}: {total / 2**30:.1f} GiB; "
        "allocating a quarter of it at a time")
    held = []
    for i in range(8):  # the fourth quarter cannot fit beside the context and the other three
        held.append(torch.empty(total // 4, dtype=torch.uint8, device="cuda"))
        say(f"block {i}: {torch.cuda.memory_allocated() / 2**30:.1f} GiB allocated")
    say("no out-of-memory error after 8 blocks")
    return 0


def jax_oom() -> int:
    import jax
    import jax.numpy as jnp

    dev = jax.devices()[0]
    stats = dev.memory_stats() or {}
    limit = int(stats.get("bytes_limit") or 2**40)
    say(f"{dev.device_kind}: JAX may use {limit / 2**30:.1f} GiB; asking for twice that")
    x = jnp.ones((limit // 2 // 4096, 4096), dtype=jnp.float32)  # 4 bytes each: 2 x the limit
    x.block_until_ready()
    say(f"allocated {x.nbytes / 2**30:.1f} GiB")
    return 0


def cupy_oom() -> int:
    import cupy as cp

    free, total = cp.cuda.Device(0).mem_info
    say(f"CuPy sees {free / 2**30:.1f} GiB free of {total / 2**30:.1f}; asking for twice the total")
    x = cp.empty(2 * total, dtype=cp.uint8)
    say(f"allocated {x.nbytes}")
    return 0


RUN = {"torch": torch_oom, "jax": jax_oom, "cupy": cupy_oom}


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--framework", choices=sorted(RUN), default="torch")
    a = p.parse_args()
    if a.cpu_half:
        cpu_half_banner(f"cuda_oom/{a.framework}", (a.framework,))
        say("no CPU variant: a host allocation past RAM is host_oom, another class")
        return 0
    return RUN[a.framework]()


if __name__ == "__main__":
    sys.exit(main())
