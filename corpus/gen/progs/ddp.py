"""A small gloo data-parallel job for torchrun / srun: `ddp.py MODE [RANK] [STEP]`.

MODE: ok, raise (RANK raises a ValueError at STEP), segv (RANK dereferences NULL), stall (RANK
stops joining the collectives; the others hit gloo's timeout), oom (RANK allocates until its
memory limit kills it), mbarrier (RANK never reaches a monitored barrier).
Rank and world come from torchrun's or srun's environment.
"""

from __future__ import annotations

import ctypes
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

mode = sys.argv[1]
bad = int(sys.argv[2]) if len(sys.argv) > 2 else 1
at = int(sys.argv[3]) if len(sys.argv) > 3 else 5
env = os.environ
rank = int(env.get("RANK", env.get("SLURM_PROCID", 0)))
world = int(env.get("WORLD_SIZE", env.get("SLURM_NTASKS", 1)))
if "MASTER_ADDR" not in env:
    env["MASTER_ADDR"], env["MASTER_PORT"] = "127.0.0.1", env.get("DDP_PORT", "29533")
timeout = float(env.get("DDP_TIMEOUT", 15))
dist.init_process_group("gloo", rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=timeout))
torch.manual_seed(rank)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
print(f"rank {rank}/{world} ready on {os.uname().nodename}", flush=True)
hoard = []
for step in range(40):
    if rank == bad and step == at:
        if mode == "raise":
            labels = {"cat": 0, "dog": 1}
            raise ValueError(f"unknown label {'bird'!r} in shard {rank}, expected one of "
                             f"{sorted(labels)}")
        if mode == "segv":
            ctypes.string_at(0)
        if mode in ("stall", "mbarrier") and mode == "stall":
            time.sleep(3600)
    if mode == "oom" and rank == bad and step >= at:
        hoard.append(torch.ones(64 * 1024 * 1024 // 4))
    if mode == "mbarrier" and step == at:
        if rank == bad:
            time.sleep(3600)
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=timeout))
    x = torch.randn(16, 32)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 5 == 0:
        print(f"[rank {rank}] step {step} loss {loss.item():.4f}", flush=True)
    time.sleep(0.1)
dist.barrier()
print(f"rank {rank} done", flush=True)
dist.destroy_process_group()
