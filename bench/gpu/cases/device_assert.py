"""cuda_device_assert: an out-of-range index on a CUDA tensor (expected: cuda_device_assert).

Modes: `index` (advanced indexing past the end), `cross_entropy` (a class label >= the number of
classes). Run with and without CUDA_LAUNCH_BLOCKING=1: the messages differ. The CPU half runs
the same code on CPU tensors, where torch checks on the host and raises IndexError instead."""

from __future__ import annotations

import os
import sys

from _common import cpu_half_banner, parser, say


def run(mode: str, device: str) -> None:
    import torch
    import torch.nn.functional as F

    say(f"mode {mode} on {device}, CUDA_LAUNCH_BLOCKING={os.environ.get('CUDA_LAUNCH_BLOCKING')}")
    if mode == "index":
        table = torch.arange(10, dtype=torch.float32, device=device)
        idx = torch.tensor([3, 7, 12], device=device)  # 12: one past the table's end and more
        picked = table[idx]
        say(f"picked sum {picked.sum().item()}")  # .item() waits for the kernel
    else:
        logits = torch.randn(8, 5, device=device)
        labels = torch.tensor([0, 1, 2, 3, 4, 0, 1, 7], device=device)  # 7: no such class
        loss = F.cross_entropy(logits, labels)
        say(f"loss {loss.item():.4f}")


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--mode", choices=("index", "cross_entropy"), default="index")
    a = p.parse_args()
    if a.cpu_half:
        if not cpu_half_banner(f"cuda_device_assert/{a.mode}", ("torch",))["torch"]:
            return 0
        try:
            run(a.mode, "cpu")
        except (IndexError, RuntimeError) as e:  # the host-side check: expected on CPU
            say(f"cpu variant raised {type(e).__name__}: {e}")
        return 0
    run(a.mode, "cuda")
    return 0


if __name__ == "__main__":
    sys.exit(main())
