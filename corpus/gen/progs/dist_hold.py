"""gloo on CPU: `dist_hold.py MODE STUCK_RANK`, launched once per rank by the driver
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment).

stuck:  rank STUCK_RANK stops joining collectives after a few steps (a silent wait in
        data loading); the others time out in gloo.
rdzv:   the driver starts fewer ranks than WORLD_SIZE; the started ones time out in the
        rendezvous (store) barrier.
"""
from __future__ import annotations

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist


def main() -> None:
    mode, stuck = sys.argv[1], int(sys.argv[2])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    print(f"[rank{rank}] init gloo world_size={world}", flush=True)
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=6))
    model = torch.nn.Linear(16, 4)
    for step in range(1000):
        if mode == "stuck" and rank == stuck and step == 3:
            time.sleep(3600)  # e.g. a reader blocked on a dead mount, no output
        loss = model(torch.randn(8, 16)).pow(2).mean()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.01 * p.grad
                p.grad = None
        print(f"[rank{rank}] step {step} loss {loss.item():.4f}", flush=True)
        time.sleep(0.2)
        if step == 6:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
