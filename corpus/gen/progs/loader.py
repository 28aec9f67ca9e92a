import ctypes
import os
import signal
import sys
import time

import torch
import trainlog
from torch.utils.data import DataLoader, Dataset

case = sys.argv[1]
# shared-memory files instead of fd passing (a common setting on clusters with low fd limits)
torch.multiprocessing.set_sharing_strategy("file_system")
log = trainlog.setup("train", 1)

class Images(Dataset):
    def __len__(self): return 4000
    def __getitem__(self, i):
        if i == 517:
            if case == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            if case == "segv":
                ctypes.string_at(0)
            if case == "exit":
                os._exit(3)
            if case == "bus":
                os.kill(os.getpid(), signal.SIGBUS)
            if case == "timeout":
                time.sleep(60)
        return torch.randn(3, 8, 8), i % 10

trainlog.config_dump({"num_workers": 2, "batch_size": 16, "pin_memory": False}, 0)
dl = DataLoader(Images(), batch_size=16, num_workers=2, timeout=5 if case == "timeout" else 0)
m = torch.nn.Linear(192, 10)
for step, (xb, yb) in enumerate(dl):
    loss = torch.nn.functional.cross_entropy(m(xb.flatten(1)), yb)
    if step % 8 == 0:
        log.info("step %d loss %.4f", step, loss.item())
