"""python_exception cases: ordinary application bugs in the middle of training."""
import json
import math
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import trainlog

case = sys.argv[1]
log = trainlog.setup("train", hash(case) % 3)

if case == "keyerror":
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Pairs(Dataset):
        def __len__(self): return 256
        def __getitem__(self, i):
            d = {"input_ids": torch.randint(0, 1000, (16,)), "labels": torch.tensor(i % 2)}
            if i == 201:  # one record from the second source lacks the labels field
                del d["labels"]
                d["label"] = torch.tensor(1)
            return d

    def collate(batch):
        return {"input_ids": torch.stack([b["input_ids"] for b in batch]),
                "labels": torch.stack([b["labels"] for b in batch])}
    trainlog.config_dump({"task": "sst2", "batch_size": 32, "max_len": 16})
    for step, b in enumerate(DataLoader(Pairs(), batch_size=32, collate_fn=collate)):
        log.info("step %d batch %s", step, tuple(b["input_ids"].shape))
elif case == "shapes":
    import torch
    trainlog.config_dump({"encoder_dim": 768, "proj_dim": 512, "head": "linear"}, 1)
    enc = torch.nn.Linear(32, 768)
    head = torch.nn.Linear(512, 3)
    trainlog.progress("warmup", 100, seed=3)
    log.info("switching to projection head")
    x = torch.randn(8, 32)
    print(head(enc(x)).shape)
elif case == "assert":
    import numpy as np
    rng = np.random.default_rng(0)
    for ep in range(3):
        trainlog.progress(f"epoch {ep}", 60, seed=ep)
        preds = rng.integers(0, 5, 1000)
        gold = rng.integers(0, 5, 1000 if ep < 2 else 998)
        assert len(preds) == len(gold), \
            f"prediction/label length mismatch: {len(preds)} vs {len(gold)}"
        log.info("epoch %d val_acc=%.4f", ep, float((preds == gold).mean()))
elif case == "thread":
    rows = ["0.5,1.2,3", "0.1,0.7,2", "NA,0.2,1"]
    def parse(chunk):
        time.sleep(0.2)
        return [tuple(float(v) for v in r.split(",")) for r in chunk]
    log.info("prefetching %d csv chunks with 4 threads", 12)
    with ThreadPoolExecutor(4) as ex:
        futs = [ex.submit(parse, rows[: 2 + (k == 7)]) for k in range(12)]
        for k, f in enumerate(futs):
            log.info("chunk %d: %d rows", k, len(f.result()))
elif case == "typeerror":
    cfg = {"lr": 1e-3, "warmup_steps": None, "total_steps": 1000}
    trainlog.config_dump(cfg, 2)
    for step in range(0, 1000, 50):
        if step < 200:
            lr = cfg["lr"] * min(1.0, (step + 1) / 200)
        else:
            lr = cfg["lr"] * 0.5 * (1 + math.cos(math.pi * (step - cfg["warmup_steps"]) / 800))
        log.info("step %d lr %.6f", step, lr)
elif case == "recursion":
    def depth(tree):
        return 1 + max((depth(c) for c in tree.get("children", [])), default=0)
    node = {}
    root = node
    for _ in range(5000):
        node["children"] = [{}]
        node = node["children"][0]
    log.info("parsed merge tree, computing depth")
    print(depth(root))
elif case == "jsoncfg":
    warnings.warn("`resume_download` is deprecated and will be removed in version 1.0.0",
                  FutureWarning, stacklevel=1)
    with open(sys.argv[2]) as f:
        text = f.read()
    cfg = json.loads(text)
    log.info("loaded %d keys", len(cfg))
