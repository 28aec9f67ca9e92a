import sys

import trainlog

case = sys.argv[1]
log = trainlog.setup("preprocess", 2)
if case == "list":
    log.info("materialising vocabulary counts in memory")
    rows = []
    for i in range(10**9):
        rows.append({"doc": i, "tokens": list(range(i % 200))})
        if i % 200000 == 0:
            log.info("%d docs in memory", i)
elif case == "numpy":
    import numpy as np
    n = 250000
    log.info("computing full pairwise similarity for %d items", n)
    emb = np.ones((n, 64), dtype=np.float32)
    sim = emb @ emb.T
elif case == "torch":
    import torch
    trainlog.config_dump({"batch_size": 4096, "seq_len": 8192, "vocab": 50257}, 0)
    logits = torch.empty(4096, 8192, 64, dtype=torch.float32)
    print(logits.sum())
