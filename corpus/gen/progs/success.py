import os
import sys
import time
import warnings

import trainlog

case = sys.argv[1]
log = trainlog.setup("trainer", hash(case) % 3)
if case == "warnings":
    import torch
    warnings.warn("torch.nn.utils.clip_grad_norm_ error_if_nonfinite default will change",
                  FutureWarning, stacklevel=1)
    m = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(m.parameters(), 0.1)
    for ep in range(3):
        trainlog.progress(f"epoch {ep}", 40, seed=ep)
        log.info("epoch %d: train_error=%.3f val_error=%.3f failed_batches=0", ep,
                 0.3 / (ep + 1), 0.35 / (ep + 1))
    log.info("Training finished. Final error rate 0.117 (no errors, 0 failed steps)")
elif case == "retry":
    import socket
    for attempt in range(1, 4):
        try:
            s = socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=2)
            s.close()
            if attempt < 3:
                raise ConnectionResetError(104, "Connection reset by peer")
            log.info("connected to metrics server on attempt %d", attempt)
            break
        except OSError:
            log.exception("upload of metrics failed (attempt %d/3), retrying", attempt)
            time.sleep(0.5)
    log.info("run complete, 12000 steps, best val_loss 0.8124")
elif case == "nccl":
    host = os.uname().nodename
    for r in range(4):
        p = f"{host}:{1000+r}:{1000+r} [{r}] NCCL INFO"
        print(f"{p} Bootstrap : Using eth0:10.0.0.{r+2}<0>")
        print(f"{p} NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: "
              "cannot open shared object file: No such file or directory")
        print(f"{p} NET/Plugin : No plugin found, using internal implementation")
        print(f"{p} comm 0x55d{r} rank {r} nranks 4 cudaDev {r} busId {r}0000 "
              "- Init COMPLETE")
    trainlog.progress("steps", 200, seed=3)
    log.info("all ranks finished; saved model to outputs/final")
elif case == "memfallback":
    import numpy as np
    bs = 65536
    while True:
        try:
            buf = np.ones((bs, 16384), dtype=np.float32)
            break
        except MemoryError:
            log.exception("batch_size=%d does not fit in host memory, halving", bs)
            bs //= 2
    log.info("using batch_size=%d", bs)
    trainlog.progress("epoch 0", 30, seed=2)
    log.info("done")
elif case == "optional":
    try:
        import apex  # noqa
    except ImportError as e:
        log.warning("apex not available (%s); falling back to torch.amp", e)
    try:
        with open("/nonexistent/.cache/tokenizer.json") as f:
            f.read()
    except FileNotFoundError:
        log.info("no cached tokenizer, building from vocab (FileNotFoundError handled)")
    trainlog.progress("tokenize", 100, seed=7)
    trainlog.progress("train", 100, seed=8)
    log.info("finished OK")
