"""Held-out set 4's gloo job for torchrun and srun: `ddp4.py MODE RANK STEP`.

MODE: ok; sampler (RANK's sampler indexes past its shard at STEP: IndexError); doublefree (RANK
frees a native buffer twice: glibc aborts); bcast (RANK stays in its "shard loading" loop and
never joins the broadcast at STEP: the others hit gloo's timeout); dlkill (a DataLoader worker of
RANK is SIGKILLed at STEP, as an outside killer would). Rank and world come from torchrun's or
srun's environment; DDP_TIMEOUT (s) and DDP_PORT as in the other sets' jobs.
"""

from __future__ import annotations

import ctypes
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

mode, bad, at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
env = os.environ
rank = int(env.get("RANK", env.get("SLURM_PROCID", 0)))
world = int(env.get("WORLD_SIZE", env.get("SLURM_NTASKS", 1)))
if "MASTER_ADDR" not in env:
    env["MASTER_ADDR"], env["MASTER_PORT"] = "127.0.0.1", env.get("DDP_PORT", "29733")
dist.init_process_group("gloo", rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=float(env.get("DDP_TIMEOUT", 20))))
torch.manual_seed(0)


class Tokens(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        info = torch.utils.data.get_worker_info()
        if mode == "dlkill" and rank == bad and info is not None and i == at * 8 + 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return torch.randn(16), torch.randn(1)


class ShardSampler:
    """Each rank reads its own contiguous shard; the last rank's is shorter than it thinks."""

    def __init__(self, n):
        self.idx = list(range(rank * n // world, (rank + 1) * n // world))
        self.claimed = len(self.idx) + (3 if rank == bad and mode == "sampler" else 0)

    def __iter__(self):
        for k in range(self.claimed):
            # the bad rank's offset table is stale after a resize: it points past the shard
            stale = rank == bad and mode == "sampler" and k >= at * 8
            yield self.idx[k + len(self.idx) if stale else k]

    def __len__(self):
        return self.claimed


model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
loader = DataLoader(Tokens(), batch_size=8, num_workers=2 if mode == "dlkill" else 0,
                    sampler=ShardSampler(4096) if mode == "sampler" else None)
print(f"[{rank}/{world}] gloo up, {len(loader)} batches per epoch", flush=True)
for step, (x, y) in enumerate(loader):
    if rank == bad and step == at:
        if mode == "doublefree":
            libc = ctypes.CDLL(None)
            libc.malloc.restype = ctypes.c_void_p
            libc.free.argtypes = [ctypes.c_void_p]
            buf = libc.malloc(4096)
            libc.free(buf)
            libc.free(buf)
        if mode == "bcast":
            print(f"[{rank}] reloading shard index", flush=True)
            time.sleep(3600)
    if mode == "bcast" and step == at:
        flag = torch.tensor([step])
        dist.broadcast(flag, src=0)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 2 == 0:
        print(f"[{rank}] step {step} loss {loss.item():.4f}", flush=True)
    time.sleep(0.2)
    if step >= 12:
        break
dist.barrier()
print(f"[{rank}] done", flush=True)
dist.destroy_process_group()
