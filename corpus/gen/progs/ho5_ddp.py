"""Held-out set 5's gloo job for torchrun and srun: `ho5_ddp.py MODE RANK STEP`.

RANK is the rank that goes wrong, at step STEP; the others do what DDP makes them do then.
MODE: ok (noisy success); segv (RANK dereferences NULL in native code, faulthandler on);
quiet (RANK leaves with exit code 7, printing nothing); recv (a two-stage pipeline: RANK, the
first stage, stalls reading its shard, the next stage times out in recv); gather (RANK stalls
before an all_gather_object); nan (RANK's batch holds an inf, its loss is not finite, its guard
raises); wiseg (a DataLoader worker of RANK segfaults in worker_init_fn); manifest (RANK's shard
manifest is cut short: JSONDecodeError); shard (RANK's shard file is missing); grow (RANK caches
every batch in RAM, as a leaky prefetch cache would). Rank and world come from torchrun's or
srun's environment; DDP_TIMEOUT (s) and DDP_PORT as in the other sets' jobs.
"""

from __future__ import annotations

import ctypes
import datetime
import faulthandler
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

mode, bad, at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
env = os.environ
rank = int(env.get("RANK", env.get("SLURM_PROCID", 0)))
world = int(env.get("WORLD_SIZE", env.get("SLURM_NTASKS", 1)))
if "MASTER_ADDR" not in env:
    env["MASTER_ADDR"], env["MASTER_PORT"] = "127.0.0.1", env.get("DDP_PORT", "29801")
if mode == "segv":
    faulthandler.enable()


def say(*a: object) -> None:
    print(*a, flush=True)


dist.init_process_group("gloo", rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=float(env.get("DDP_TIMEOUT", 20))))
torch.manual_seed(rank)
say(f"rank {rank}/{world} on {os.uname().nodename}: process group up (gloo)")


def shard_path() -> str:
    return os.path.join(env.get("SHARD_DIR", tempfile.gettempdir()), f"ho5-shard-{rank:04d}.json")


if mode in ("manifest", "shard"):
    path = shard_path()
    if not (mode == "shard" and rank == bad):
        with open(path, "w") as f:
            text = json.dumps({"files": [f"part-{rank}-{i}.bin" for i in range(40)],
                               "samples": 40 * 512})
            f.write(text[:57] if (mode == "manifest" and rank == bad) else text)
    with open(path) as f:
        manifest = json.load(f)
    say(f"rank {rank}: manifest lists {len(manifest['files'])} files")


def worker_init(wid: int) -> None:
    if mode == "wiseg" and rank == bad and wid == 1:
        time.sleep(0.5)
        ctypes.string_at(0)


class Clips(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        return torch.randn(16), torch.randn(1)


model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
loader = DataLoader(Clips(), batch_size=8, num_workers=2 if mode == "wiseg" else 0,
                    worker_init_fn=worker_init)
cache = []
for step, (x, y) in enumerate(loader):
    if rank == bad and step == at:
        if mode == "segv":
            say(f"rank {rank}: fused kernel on batch {step}")
            ctypes.string_at(0)
        if mode == "quiet":
            os._exit(7)
        if mode in ("recv", "gather"):
            say(f"rank {rank}: re-reading shard index from the object store")
            time.sleep(3600)
        if mode == "nan":
            x[3, 5] = float("inf")
    if mode == "grow" and rank == bad:
        cache.append(torch.ones(8 << 20))  # 32 MiB a step, never freed
    if mode == "recv" and step == at:
        act = torch.zeros(8, 16)
        if rank == 0:
            dist.send(act, dst=1)
        else:
            dist.recv(act, src=0)
    if mode == "gather" and step == at:
        stats = [None] * world
        dist.all_gather_object(stats, {"rank": rank, "seen": step * 8})
    loss = torch.nn.functional.mse_loss(model(x), y)
    if mode == "nan" and not torch.isfinite(loss):
        raise FloatingPointError(f"rank {rank}: non-finite loss {loss.item()} at step {step}")
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 2 == 0:
        say(f"rank {rank} step {step} loss {loss.item():.4f}"
            + (f" cache {len(cache) * 32} MiB" if cache else ""))
    time.sleep(0.2)
    if step >= 14:
        break
dist.barrier()
say(f"rank {rank}: done")
dist.destroy_process_group()
