"""collective_timeout through torch.distributed (expected: collective_timeout).

Modes:
  gloo_skip     under `torchrun --nproc-per-node 2`, rank 1 skips an all_reduce that rank 0
                waits for under a 5 s timeout (gloo: NCCL cannot put two ranks on one GPU).
                The tensors are on the GPU.
  nccl_stalled  one NCCL rank (world size 1) whose stream is kept busy past a 3 s timeout:
                ProcessGroupNCCL's watchdog times the pending all_reduce out.
"""

from __future__ import annotations

import datetime
import sys
import time

from _common import cpu_half_banner, free_port, parser, say


def gloo_skip(device: str) -> int:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
    rank = dist.get_rank()
    t = torch.ones(1024, device=device)
    dist.all_reduce(t)  # both ranks: the group works
    say(f"rank {rank}: first all_reduce gave {t[0].item()} on {device}")
    if rank == 1:
        say("rank 1: skipping the next all_reduce (the bug: a branch only rank 0 takes)")
        time.sleep(15)
        return 0
    dist.all_reduce(t)
    say(f"rank {rank}: second all_reduce gave {t[0].item()}")
    return 0


def nccl_stalled() -> int:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1, timeout=datetime.timedelta(seconds=3))
    t = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    say("communicator up; the stream now spins ~20 s, an all_reduce waits behind it")
    torch.cuda._sleep(40_000_000_000)
    dist.all_reduce(t)
    torch.cuda.synchronize()
    say("the all_reduce finished (no timeout?)")
    return 0


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--mode", choices=("gloo_skip", "nccl_stalled"), default="gloo_skip")
    a = p.parse_args()
    if a.cpu_half:
        cpu_half_banner(f"collective_timeout/{a.mode}", ("torch",))
        say("no CPU variant: a gloo timeout on CPU tensors is already really run in the corpus"
            if a.mode == "gloo_skip" else "no CPU variant: NCCL needs a GPU")
        return 0
    return gloo_skip("cuda") if a.mode == "gloo_skip" else nccl_stalled()


if __name__ == "__main__":
    sys.exit(main())
