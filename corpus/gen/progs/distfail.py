"""One rank of a real torch.distributed (gloo, CPU) data-parallel training run.

usage: distfail.py MODE ROOT SEED   (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the env)
MODE says what happens on rank ROOT at some step; the other ranks just keep training and hit
what really follows: a collective timeout, a closed connection, a reset.
  ok        nobody fails
  stuck     ROOT stops joining collectives (blocks silently)
  raise-*   ROOT raises (ValueError, KeyError, RuntimeError, ...)
  fnf       ROOT cannot open its data shard
  oom       ROOT hits MemoryError (the launcher gave it a small address-space limit)
  segv      ROOT crashes in native code
  nan       ROOT's loss becomes NaN and it stops
  ckpt      ROOT loads a corrupt checkpoint shard
  exit      ROOT exits with a bare status
"""

from __future__ import annotations

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
from noise import banner, rng_for, say

MODE, ROOT, SEED = sys.argv[1], int(sys.argv[2]), sys.argv[3]
RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
R = rng_for(f"dist-{MODE}-{SEED}")  # same on every rank: they agree on the failing step
# Short only where the timeout is the point: elsewhere a slow rank on a busy machine must not
# turn into a collective timeout the label does not describe.
TIMEOUT = R.choice([4, 5, 6]) if MODE == "stuck" else 60
FAIL_AT = R.randint(2, 12)
TAGGED = R.random() < 0.6  # some launchers prefix rank tags, some do not
STEPS = FAIL_AT + 3 if MODE != "ok" else R.randint(5, 15)  # drawn before ranks' R diverge


def log(msg: str) -> None:
    say(f"[rank{RANK}]: {msg}" if TAGGED else msg)


def fail_here() -> None:
    if MODE == "stuck":
        log(R.choice(["evaluating on validation shard", "writing sample images",
                      "computing metrics"]))
        time.sleep(3600)
    elif MODE.startswith("raise-"):
        kind = MODE.split("-", 1)[1]
        if kind == "value":
            raise ValueError(f"batch {FAIL_AT}: sequence length {R.randint(2049, 9000)} exceeds "
                             "max_position_embeddings=2048")
        if kind == "key":
            {"input_ids": 1}["attention_mask"]
        if kind == "shape":
            torch.randn(4, R.randint(5, 9)) @ torch.randn(4, 4)
        if kind == "assert":
            assert FAIL_AT < 0, f"rank {RANK}: empty batch after filtering"
        if kind == "type":
            len(None)
    elif MODE == "fnf":
        open(f"/data/shards/part-{RANK:05d}-of-{WORLD:05d}.parquet", "rb")  # noqa: SIM115
    elif MODE == "oom":
        bufs = []
        while True:
            bufs.append(bytearray(128 << 20))
    elif MODE == "segv":
        import ctypes
        ctypes.string_at(0)
    elif MODE == "nan":
        raise RuntimeError(f"Loss is nan at step {FAIL_AT} on rank {RANK}, stopping training")
    elif MODE == "ckpt":
        path = f"/tmp/corpus-dist-shard-{SEED}-{RANK}.pt"
        torch.save({"w": torch.randn(64, 64)}, path)
        with open(path, "r+b") as f:
            f.truncate(R.randint(200, 2000))
        torch.load(path)
    elif MODE == "exit":
        sys.exit(R.choice([1, 2, 17]))


def main() -> None:
    if RANK == 0:
        banner(R)
    dist.init_process_group("gloo", rank=RANK, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=TIMEOUT))
    log(f"initialized process group: world_size={WORLD} backend=gloo")
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1, STEPS + 1):
        if MODE != "ok" and RANK == ROOT and step == FAIL_AT:
            fail_here()
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():  # plain DDP-style gradient averaging
            dist.all_reduce(p.grad)
            p.grad /= WORLD
        opt.step()
        if RANK == 0 or R.random() < 0.3:
            log(f"step {step} loss {loss.item():.4f}")
    dist.barrier()
    log("training finished")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
