import sys

import trainlog

case = sys.argv[1]
log = trainlog.setup("launcher", 1)
trainlog.env_banner()
if case == "wandb":
    trainlog.config_dump({"project": "llm-sft", "report_to": "wandb", "epochs": 3})
    log.info("initialising experiment tracker")
    import wandb  # noqa
    wandb.init(project="llm-sft")
elif case == "name":
    import torch
    log.info("torch %s", torch.__version__)
    from torch.optim.lr_scheduler import WarmupCosineAnnealingLR  # noqa
elif case == "ctypes":
    import ctypes
    log.info("loading fused optimizer kernels from %s", sys.argv[2])
    lib = ctypes.CDLL(sys.argv[2])
    lib.fused_adam_step()
elif case == "circular":
    sys.path.insert(0, sys.argv[2])
    import mytrainer.model  # noqa
