import os
import sys

import trainlog

case = sys.argv[1]
log = trainlog.setup("trainer", 0)
if case == "save":
    import torch
    m = torch.nn.Linear(16, 16)
    trainlog.progress("epoch 0", 80, seed=2)
    path = os.path.join(sys.argv[2], "step_000800.pt")
    log.info("saving checkpoint to %s", path)
    torch.save(m.state_dict(), path)
elif case == "token":
    log.info("authenticating to model hub")
    with open(sys.argv[2]) as f:
        token = f.read().strip()
