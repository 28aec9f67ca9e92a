import json
import sys

import trainlog

case, d = sys.argv[1], sys.argv[2]
log = trainlog.setup("trainer", 1)
if case == "torchsave":
    import torch
    m = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 256))
    trainlog.progress("epoch 3", 100, seed=4)
    log.info("saving checkpoint to %s/ckpt-3.pt", d)
    torch.save({"model": m.state_dict(), "epoch": 3}, f"{d}/ckpt-3.pt")
    log.info("saved")
elif case == "npsave":
    import numpy as np
    log.info("caching features for 2048 samples")
    feats = np.random.default_rng(0).normal(size=(2048, 128)).astype("float32")
    np.save(f"{d}/features.npy", feats)
elif case == "metrics":
    with open(f"{d}/metrics.jsonl", "a") as f:
        for step in range(100000):
            rec = {"step": step, "loss": 1.0 / (step + 1), "lr": 3e-4, "grad_norm": 0.5,
                   "tokens_seen": step * 4096}
            f.write(json.dumps(rec) + "\n")
            f.flush()
            if step % 500 == 0:
                log.info("step %d", step)
