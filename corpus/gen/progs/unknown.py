import os
import sys

import trainlog

case = sys.argv[1]
log = trainlog.setup("train", 0)
trainlog.config_dump({"epochs": 4, "lr": 1e-3})
if case == "exit1":
    trainlog.progress("epoch 0", 60, seed=1)
    log.info("evaluating")
    sys.exit(1)
elif case == "osexit":
    trainlog.progress("epoch 0", 100, upto=63, seed=2)
    os._exit(17)
