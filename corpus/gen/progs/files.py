import os
import sys

import trainlog

case = sys.argv[1]
log = trainlog.setup("data", 2)
if case == "shard":
    trainlog.config_dump({"train_shards": "shards/train-{00000..00031}.tar", "shuffle": 5000})
    os.makedirs("shards", exist_ok=True)
    for i in range(32):
        if i != 17:
            with open(f"shards/train-{i:05d}.tar", "wb") as f:
                f.write(b"x" * 100)
    for i in range(32):
        with open(f"shards/train-{i:05d}.tar", "rb") as f:
            log.info("read shard %d (%d bytes)", i, len(f.read()))
elif case == "ckpt":
    import torch
    log.info("resume=True, looking for latest checkpoint")
    state = torch.load("outputs/run-42/checkpoints/last.pt", map_location="cpu")
elif case == "npy":
    import numpy as np
    trainlog.progress("building index", 50, seed=1)
    emb = np.load("/tmp/holdout2-embeddings/passages_fp16.npy")
elif case == "scandir":
    root = "/tmp/holdout2-imagenet-subset/train"
    log.info("indexing images under %s", root)
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
