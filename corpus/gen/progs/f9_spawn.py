"""Launcher of the f9r- tuning cases: a data-parallel-style job started with
torch.multiprocessing.spawn (every rank prints into the launcher's one log) where one rank
fails, and a pool of worker processes (concurrent.futures, joblib/loky) whose worker dies.

Usage: f9_spawn.py spawn WORLD BAD_RANK MODE   (MODE: raise | segv | exit | nan | kill | dl)
       f9_spawn.py pool MODE                   (MODE: segv | segv_fh | kill)
       f9_spawn.py loky MODE                   (MODE: segv | kill)
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import signal
import sys
import time


def _crash() -> None:
    ctypes.string_at(0)  # reads address 0: SIGSEGV


def _rank_job(rank: int, world: int, bad: int, mode: str) -> None:
    import torch

    torch.manual_seed(rank)
    w = torch.randn(8, 1)
    x = torch.randn(64, 8)
    y = x @ torch.ones(8, 1)
    for step in range(4):
        pred = x @ w
        loss = ((pred - y) ** 2).mean()
        if rank == bad and step == 2:
            if mode == "raise":
                table = {"train": 0, "valid": 1}
                print(f"[rank {rank}] switching split", flush=True)
                _ = table["test"]
            if mode == "segv":
                _crash()
            if mode == "exit":
                print(f"[rank {rank}] shard list empty, giving up", flush=True)
                sys.exit(3)
            if mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if mode == "nan":
                loss = loss * float("nan")
                if not torch.isfinite(loss):
                    raise RuntimeError(f"rank {rank}: non-finite loss {loss.item()} at step "
                                       f"{step}")
            if mode == "dl":
                _loader_with_dying_worker(rank)
        w = w - 0.01 * (2 * x.T @ (pred - y) / len(x))
        print(f"[rank {rank}/{world}] step {step} loss {loss.item():.4f}", flush=True)
        time.sleep(0.2 if rank != bad else 0.05)
    time.sleep(3)  # the healthy ranks are still running when the bad one ends


class _Shards:
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int):
        import torch

        if i == 20:
            os.kill(os.getpid(), signal.SIGKILL)  # the worker process dies (as by the OOM killer)
        return torch.full((4,), float(i))


def _loader_with_dying_worker(rank: int) -> None:
    from torch.utils.data import DataLoader

    for i, b in enumerate(DataLoader(_Shards(), batch_size=4, num_workers=2)):
        print(f"[rank {rank}] batch {i} sum {b.sum().item():.0f}", flush=True)


def spawn(world: int, bad: int, mode: str) -> None:
    import torch.multiprocessing as mp

    print(f"starting {world} ranks (mp.spawn), rank {bad} will hit '{mode}'", flush=True)
    mp.spawn(_rank_job, args=(world, bad, mode), nprocs=world, join=True)
    print("done", flush=True)


def _pool_task(i: int, mode: str) -> int:
    if i == 5:
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "segv_fh":
            faulthandler.enable()
        _crash()
    time.sleep(0.05)
    return i * i


def pool(mode: str) -> None:
    from concurrent.futures import ProcessPoolExecutor

    print("featurising 16 shards with 3 worker processes", flush=True)
    with ProcessPoolExecutor(max_workers=3) as ex:
        for i, r in enumerate(ex.map(_pool_task, range(16), [mode] * 16)):
            print(f"shard {i} -> {r}", flush=True)


def loky(mode: str) -> None:
    from joblib import Parallel, delayed

    print("scoring 16 folds with joblib (loky backend, 3 workers)", flush=True)
    out = Parallel(n_jobs=3, backend="loky")(delayed(_pool_task)(i, mode) for i in range(16))
    print(f"scores {out}", flush=True)


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "spawn":
        spawn(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    elif what == "pool":
        pool(sys.argv[2])
    elif what == "loky":
        loky(sys.argv[2])
    else:
        raise SystemExit(f"f9_spawn.py: unknown job {what!r}")
