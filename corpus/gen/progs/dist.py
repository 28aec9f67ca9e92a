"""gloo CPU jobs where one rank gets stuck (argv: case rank world port stuck_rank)."""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
import trainlog

case, port = sys.argv[1], sys.argv[4]
rank, world, stuck = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[5])
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE=str(world))
log = trainlog.setup(f"rank{rank}", 2)
trainlog.env_banner()
timeout = datetime.timedelta(seconds=6)
if case == "rendezvous" and rank == stuck:
    log.info("preprocessing local shard before joining the group")
    time.sleep(3600)
dist.init_process_group("gloo", timeout=timeout)
log.info("process group ready (backend=gloo, world=%d)", world)
model = torch.nn.Linear(32, 32)
for p in model.parameters():
    dist.broadcast(p.data, 0)
log.info("parameters synced")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1000):
    if rank == stuck and step == 5:
        if case == "ckpt":
            log.info("saving checkpoint (rank %d writes the full state)", rank)
        time.sleep(3600)   # stuck: never reaches the next collective
    loss = model(torch.randn(8, 32)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    for p in model.parameters():
        if case == "barrier":
            pass
        else:
            dist.all_reduce(p.grad)
            p.grad /= world
    if case in ("barrier", "ckpt"):
        dist.barrier()
    opt.step()
    log.info("step %d loss %.4f", step, loss.item())
    time.sleep(0.1)
