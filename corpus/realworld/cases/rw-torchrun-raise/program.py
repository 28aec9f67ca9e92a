
import os, signal, sys, time
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"rank {rank} of {dist.get_world_size()} ready", flush=True)
if rank == int(os.environ["FAIL_RANK"]):
    time.sleep(0.5)
    if os.environ["HOW"] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise ValueError(f"bad shard index {rank * 7} for 4 shards")
time.sleep(30)
