"""nccl_error through torch.distributed (expected: nccl_error).

Modes:
  duplicate_gpu  each rank of `torchrun --nproc-per-node 2` binds the same (only) GPU and runs an
                 all_reduce: NCCL refuses two ranks of one communicator on one device.
  abort          one rank (world size 1) enqueues an all_reduce behind a busy stream, aborts its
                 communicator while the collective is pending, then waits for it.
The CPU half checks the arguments and what is installed (NCCL needs a GPU)."""

from __future__ import annotations

import datetime
import os
import sys

from _common import cpu_half_banner, free_port, parser, say


def duplicate_gpu() -> int:
    import torch
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    torch.cuda.set_device(0)  # the bug: every rank on device 0 (should be LOCAL_RANK)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=30))
    say(f"rank {rank}/{dist.get_world_size()} on cuda:0, NCCL {torch.cuda.nccl.version()}")
    t = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    say(f"rank {rank}: all_reduce gave {t[0].item()}")
    dist.destroy_process_group()
    return 0


def abort() -> int:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1, timeout=datetime.timedelta(seconds=30))
    t = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(t)  # the communicator exists from here on
    torch.cuda.synchronize()
    say("communicator up; stalling the stream, then an all_reduce behind it")
    torch.cuda._sleep(4_000_000_000)  # about 2 s of spinning at 2 GHz
    work = dist.all_reduce(t, async_op=True)
    pg = dist.group.WORLD
    if hasattr(pg, "abort"):
        say("aborting the process group's communicator while the all_reduce is pending")
        pg.abort()
    else:
        say("aborting through distributed_c10d._abort_process_group()")
        dist.distributed_c10d._abort_process_group()
    work.wait()
    torch.cuda.synchronize()
    say("the pending all_reduce returned; another one on the aborted group")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    say(f"all_reduce gave {t[0].item()}")
    return 0


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--mode", choices=("duplicate_gpu", "abort"), default="duplicate_gpu")
    a = p.parse_args()
    if a.cpu_half:
        cpu_half_banner(f"nccl_error/{a.mode}", ("torch",))
        say("no CPU variant: NCCL needs a GPU")
        return 0
    return duplicate_gpu() if a.mode == "duplicate_gpu" else abort()


if __name__ == "__main__":
    sys.exit(main())
