"""Tuning-corpus programs (prefix f6r-): Open MPI ranks that fail, and NaN wordings that are
no divergence.

  f6_ranks.py worker FAIL RANK   one task under mpirun (OMPI_COMM_WORLD_RANK): rank RANK fails
                                 by FAIL (segv | exit4 | abort) after a few sweeps; the others
                                 go on a little longer and end well
  f6_ranks.py remote FAIL WORK   mpirun over two "hosts" (localhost, 127.0.0.2, the second
                                 reached through an rsh agent that starts its orted here);
                                 rank 1, on 127.0.0.2, fails by FAIL
  f6_ranks.py pandas_nan_cast    the input table has NaN in an integer column: pandas refuses
  f6_ranks.py sklearn_inf_scale  scikit-learn's check_array on a feature matrix with inf
  f6_ranks.py ok_nan_counts      a training loop that checks its gradients and logs zero counts
                                 of non-finite values, then ends well

Imports are lazy: a scenario pays only for its own. pandas and scikit-learn come from
/opt/gpualert-ho6/site-packages (corpus/holdout6/README.md), appended to sys.path.
"""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time
from pathlib import Path


def say(msg: str) -> None:
    print(msg, flush=True)


def _fail(how: str) -> None:
    if how == "segv":
        ctypes.string_at(0)  # reads address 0: SIGSEGV, no Python traceback
    elif how == "abort":
        os.abort()
    sys.exit(4)


def worker() -> None:
    how, bad = sys.argv[2], int(sys.argv[3])
    r = int(os.environ["OMPI_COMM_WORLD_RANK"])
    for i in range(4):
        say(f"(r{r}) cg iteration {i} residual {0.5 ** (i + r):.4e}")
        time.sleep(0.2)
        if r == bad and i == 2:
            _fail(how)
    time.sleep(3)
    say(f"(r{r}) converged")


RSH_AGENT = """#!/bin/sh
# mpirun's "ssh": start the daemon for the named host here
shift
exec sh -c "$*"
"""


def remote() -> None:
    how, work = sys.argv[2], Path(sys.argv[3])
    work.mkdir(parents=True, exist_ok=True)
    agent = work / "rsh-agent.sh"
    agent.write_text(RSH_AGENT)
    agent.chmod(0o755)
    (work / "hosts").write_text("localhost slots=1\n127.0.0.2 slots=1\n")
    say("launching 2 ranks on localhost and 127.0.0.2")
    p = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2",
                        "--hostfile", str(work / "hosts"), "--mca", "plm_rsh_agent", str(agent),
                        "--mca", "btl", "self,tcp", sys.executable, __file__, "worker", how, "1"])
    sys.exit(p.returncode)


def pandas_nan_cast() -> None:
    sys.path.append("/opt/gpualert-ho6/site-packages")
    import numpy as np
    import pandas as pd
    df = pd.DataFrame({"user": [1, 2, 3, 4], "clicks": [3.0, np.nan, 7.0, 1.0]})
    say(f"loaded {len(df)} rows; casting feature columns")
    df["clicks"] = df["clicks"].astype("int64")


def sklearn_inf_scale() -> None:
    sys.path.append("/opt/gpualert-ho6/site-packages")
    import numpy as np
    from sklearn.preprocessing import StandardScaler
    x = np.random.default_rng(0).normal(size=(64, 4))
    x[5, 2] = np.inf  # a ratio feature divided by a zero count upstream
    say("fitting the feature scaler on 64 rows")
    StandardScaler().fit(x)


def ok_nan_counts() -> None:
    import torch
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    for step in range(5):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        bad = sum(int((~torch.isfinite(p.grad)).sum()) for p in model.parameters())
        say(f"step {step} loss {loss.item():.4f} nan_check: {bad} NaN/Inf in gradients")
        say(f"step {step} found {bad} nan values in the weights; nan: {bad}")
        opt.step()
    say("training finished, 0 non-finite losses over 5 steps")


if __name__ == "__main__":
    globals()[sys.argv[1]]()
