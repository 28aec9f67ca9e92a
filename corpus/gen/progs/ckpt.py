import os
import pickle
import sys

import trainlog

case, path = sys.argv[1], sys.argv[2]
log = trainlog.setup("resume", 0)
if case == "make":
    import torch
    kind = sys.argv[3]
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LayerNorm(64))
    if kind == "pickle":
        with open(path, "wb") as f:
            pickle.dump({"step": 1200, "weights": [float(i) for i in range(20000)]}, f)
    elif kind == "npz":
        import numpy as np
        np.savez_compressed(path, w=np.random.default_rng(0).normal(size=(256, 256)))
    else:
        torch.save({"model": m.state_dict(), "step": 1200}, path)
    sys.exit(0)
trainlog.config_dump({"resume_from": path, "strict": True}, 1)
log.info("loading checkpoint %s (%d bytes)", path, os.path.getsize(path))
if case == "torch":
    import torch
    weights_only = sys.argv[3] == "wo" if len(sys.argv) > 3 else True
    st = torch.load(path, map_location="cpu", weights_only=weights_only)
elif case == "pickle":
    with open(path, "rb") as f:
        st = pickle.load(f)
elif case == "npz":
    import numpy as np
    w = np.load(path)["w"]
    st = {"w": w}
log.info("restored step %s", st.get("step") if isinstance(st, dict) else "?")
