"""Failures of the kinds held-out set 7 missed, run for real on a CPU: `f7_mix.py SCENARIO
[ARG ...]` (tuning-corpus cases f7m-*).

- a DataLoader whose worker is stuck (a map-style Dataset waiting on a lock the main process
  holds; an IterableDataset worker reading a pipe nobody writes): the DataLoader's own
  `timeout=` ends the loop ("DataLoader timed out after N seconds")
- torch >= 2.6's weights_only refusal of a checkpoint that holds an object torch does not
  allow by default (numpy's RNG state beside the weights, a model pickled whole)
- a gloo collective in which one rank arrives late (it sleeps past the process group's
  timeout): the ranks that arrived report the timeout, the straggler reports nothing of it
"""

from __future__ import annotations

import os
import sys
import time

from progkit import ARG, ARGS, say, steps

# ---- a stuck DataLoader worker ----

def dl_lock_held() -> None:
    """Map-style Dataset whose __getitem__ takes a multiprocessing lock the main process
    takes after the first batches (a shared index cache being rebuilt) and never releases."""
    import multiprocessing as mp

    import torch
    from torch.utils.data import DataLoader, Dataset

    lock = mp.get_context("fork").Lock()

    class Shards(Dataset):
        def __len__(self) -> int:
            return 4096

        def __getitem__(self, i: int) -> torch.Tensor:
            with lock:  # the shard index is shared between the workers
                return torch.full((16,), float(i % 7))

    dl = DataLoader(Shards(), batch_size=32, num_workers=2, timeout=int(ARG or 6),
                    multiprocessing_context="fork", prefetch_factor=1)
    for step, x in enumerate(dl):
        say(f"step {step} | batch mean {x.mean().item():.3f}")
        if step == 3:
            say("rebuilding shard index (holding the index lock)")
            lock.acquire()
        time.sleep(0.05)


def dl_pipe_iterable() -> None:
    """IterableDataset whose workers read records from a named pipe that the producer
    (here: nobody, after the header) never writes to: the read blocks for ever."""
    import torch
    from torch.utils.data import DataLoader, IterableDataset

    fifo = os.path.join(ARGS[0], "records.fifo")
    os.makedirs(ARGS[0], exist_ok=True)
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    # a writer kept open so the workers' reads block instead of seeing EOF
    keep = os.open(fifo, os.O_RDWR)

    class Records(IterableDataset):
        def __iter__(self):
            with open(fifo, "rb") as f:
                while True:
                    rec = f.read(64)
                    yield torch.frombuffer(bytearray(rec), dtype=torch.uint8).float()

    steps("warmup", 3, loss=2.3)
    say(f"streaming records from {fifo}")
    dl = DataLoader(Records(), batch_size=8, num_workers=2, timeout=int(ARGS[1]) if ARGS[1:] else 5)
    try:
        for step, x in enumerate(dl):
            say(f"step {step} | {x.shape}")
    finally:
        os.close(keep)


# ---- torch.load(weights_only=True) refusing what a checkpoint holds ----

def wo_numpy_rng() -> None:
    """A resume script: the checkpoint (written by an older training script) keeps numpy's RNG
    state next to the weights; torch.load's weights_only default refuses numpy's globals."""
    import numpy as np
    import torch

    path = os.path.join(ARG, "last.ckpt")
    os.makedirs(ARG, exist_ok=True)
    net = torch.nn.Linear(16, 4)
    torch.save({"model": net.state_dict(), "epoch": 7, "np_rng": np.random.get_state()}, path)
    say(f"saved {path}")
    steps("resume", 2, loss=1.1)
    ck = torch.load(path, map_location="cpu")
    net.load_state_dict(ck["model"])


def wo_whole_model() -> None:
    """An evaluation script that loads a model pickled whole (torch.save(model)) by a training
    script whose class lives in __main__: weights_only refuses the class."""
    import torch

    class TinyNet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(8, 2)

    TinyNet.__module__, TinyNet.__qualname__ = "__main__", "TinyNet"
    globals()["TinyNet"] = TinyNet
    path = os.path.join(ARG, "model_full.pt")
    os.makedirs(ARG, exist_ok=True)
    torch.save(TinyNet(), path)
    say(f"evaluating {path} on 2048 held-out samples")
    model = torch.load(path)
    model.eval()


# ---- a straggler in a gloo collective ----

def gloo_straggler() -> None:
    """Under torchrun: every rank all_gathers its batch statistics each step; rank ARG (an
    evaluation it runs alone) sleeps past the process group's timeout before the next
    all_gather, so the others time out waiting for it. ARGS[1]: the timeout in seconds."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    late, tmo = int(ARG), int(ARGS[1]) if ARGS[1:] else 6
    dist.init_process_group("gloo", timeout=timedelta(seconds=tmo))
    rank, world = dist.get_rank(), dist.get_world_size()
    for step in range(4):
        stats = torch.tensor([float(rank), step * 0.5])
        out = [torch.zeros(2) for _ in range(world)]
        dist.all_gather(out, stats)
        if rank == 0:
            say(f"step {step} | gathered mean {torch.stack(out).mean().item():.3f}")
        if step == 2 and rank == late:
            say(f"rank {rank}: running validation on the held-out shard")
            time.sleep(tmo * 4)
    dist.destroy_process_group()


MODES = {
    "wo_numpy_rng": wo_numpy_rng,
    "wo_whole_model": wo_whole_model,
    "gloo_straggler": gloo_straggler,
    "dl_lock_held": dl_lock_held,
    "dl_pipe_iterable": dl_pipe_iterable,
}

if __name__ == "__main__":
    MODES[sys.argv[1]]()
