"""Really-run programs for the kinds of input held-out set 4 showed weak (corpus.yaml's
"after holdout4" block): NaN/Inf said as "not finite", a NaN step the loop skipped (and one
that never recovered), an exception logged as the work's end on exit 0 (and one logged and
survived), a torch build without the backend asked for. `python lastwords.py NAME [ARG]`.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time


def _torch_linear(lr: float, steps: int, nan_at: set[int] | None = None):
    """A tiny linear regression; yields (step, loss tensor, apply-update callable)."""
    import torch

    torch.manual_seed(0)
    w = torch.zeros(4, requires_grad=True)
    x = torch.randn(64, 4)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0])
    for step in range(steps):
        xb = x.clone()
        if nan_at and step in nan_at:
            xb[3, 1] = float("nan")  # a corrupt sample
        loss = ((xb @ w - y) ** 2).mean()
        w.grad = None
        loss.backward()

        def update(w=w):
            with torch.no_grad():
                w -= lr * w.grad
        yield step, loss, update


def guard_not_finite() -> None:
    """lr far too large: the loss grows until the guard stops it (RuntimeError, exit 1)."""
    import torch

    for step, loss, update in _torch_linear(lr=3.0, steps=400):
        if step % 5 == 0:
            print(f"iter {step:4d}  mse {loss.item():.4e}", flush=True)
        if not torch.isfinite(loss):
            raise RuntimeError(f"training loss is not finite at iteration {step}")
        update()


def chkfinite() -> None:
    """Feature scaling by a column's range that is 0: numpy's finite check refuses the data."""
    import numpy as np

    rng = np.random.default_rng(1)
    feats = rng.normal(size=(256, 5))
    feats[:, 3] = 7.0  # a constant column
    print(f"loaded features {feats.shape}", flush=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = (feats - feats.min(0)) / (feats.max(0) - feats.min(0))
    print("scaled to [0, 1]; fitting ridge model", flush=True)
    w = np.linalg.solve(np.asarray_chkfinite(scaled.T @ scaled) + np.eye(5), scaled.T @ feats[:, 0])
    print(w)


def fpe_update() -> None:
    """A user's check on the parameter update raises FloatingPointError (exit 1)."""
    for step, loss, update in _torch_linear(lr=2.5, steps=400):
        print(f"step={step} loss={loss.item():.6g}", flush=True)
        if not math.isfinite(loss.item()):
            raise FloatingPointError(f"Non-finite parameter update in linear.weight at step {step}")
        update()


def skip_recovered() -> None:
    """Two corrupt batches give a NaN loss; the loop skips their updates and trains on to a
    normal end (exit 0): success."""
    import torch

    log = logging.getLogger("fit")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for step, loss, update in _torch_linear(lr=0.05, steps=120, nan_at={41, 77}):
        if not torch.isfinite(loss):
            log.warning("non-finite loss (%s) at iteration %d; skipped this update",
                        loss.item(), step)
            continue
        update()
        if step % 10 == 0:
            log.info("iteration %d loss %.5f", step, loss.item())
    log.info("training complete, final loss %.6f", loss.item())


def skip_grad_inf_ok() -> None:
    """An inf gradient norm on one step: the step is skipped (as a GradScaler would), training
    goes on and the run ends normally (exit 0): success."""
    for step, loss, update in _torch_linear(lr=0.05, steps=60, nan_at={12}):
        gnorm = float("inf") if step == 12 else loss.item() ** 0.5
        if not math.isfinite(gnorm):
            print(f"Skipping step {step}: grad norm is {gnorm}", flush=True)
            continue
        update()
        print(f"step {step} | loss {loss.item():.4f} | grad norm {gnorm:.3f}", flush=True)
    print("saved model.pt", flush=True)


def skip_to_end() -> None:
    """Training diverges; from then on every batch's loss is NaN and is skipped, to the end of
    the run, which exits 0: nan_divergence (a silent failure)."""
    w = 1.0
    for step in range(60):
        loss = (w * 3.0) * (w * 3.0)
        if not math.isfinite(loss) or loss > 1e300:
            loss = float("nan")
        if math.isnan(loss):
            print(f"[{step:03d}] loss=nan -> skipping batch", flush=True)
            continue
        print(f"[{step:03d}] loss={loss:.4g}", flush=True)
        w *= 1e12  # the learning rate is far too large
    print("epoch finished", flush=True)


def stop_exit0() -> None:
    """The loop sees the loss become NaN, says it stops, and returns normally (exit 0)."""
    import torch

    for step, loss, update in _torch_linear(lr=2.0, steps=2000):
        if step % 4 == 0:
            print(f"ep 0 it {step} loss {loss.item():.3e}", flush=True)
        if torch.isnan(loss):
            print(f"Loss became NaN at it {step}; stopping early.", flush=True)
            return
        update()


def _shards(log: logging.Logger) -> None:
    for i in range(3):
        log.info("shard %d: %d records", i, 1000 + i)
        time.sleep(0.05)


def abort_exit0() -> None:
    """A config key is missing; the program logs CRITICAL ... aborting with the traceback and
    returns (exit 0): python_exception, the job exited 0."""
    log = logging.getLogger("etl")
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s [%(name)s] %(message)s")
    cfg = {"input": "/data/in", "batch": 64}
    _shards(log)
    try:
        out = cfg["output_dir"]
        print(out)
    except KeyError:
        log.critical("bad configuration, aborting", exc_info=True)
        return


def fnf_exit0() -> None:
    """The vocabulary file is not there; logged as the end of the run, then sys.exit(0):
    file_not_found, the job exited 0."""
    log = logging.getLogger("tok")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s:%(name)s:%(message)s")
    _shards(log)
    try:
        with open(os.path.join(sys.argv[2] if len(sys.argv) > 2 else "/tmp", "vocab-32k.txt")) as f:
            f.read()
    except OSError:
        log.exception("cannot load the vocabulary; exiting")
        sys.exit(0)


def retry_ok() -> None:
    """A fetch fails once and is logged with its traceback; the retry works and the work goes
    on to a normal end (exit 0): success."""
    log = logging.getLogger("fetch")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    for attempt in range(1, 4):
        try:
            if attempt == 1:
                raise ConnectionResetError(104, "Connection reset by peer")
            log.info("fetched shard list on attempt %d", attempt)
            break
        except ConnectionResetError:
            log.exception("fetching the shard list failed, retrying (%d/3)", attempt)
    for i in range(12):
        log.info("processed shard %d/12", i + 1)


def skip_shard_ok() -> None:
    """One shard is bad: the error (and its traceback) says it gives up on that shard, and the
    other shards are processed to a normal end (exit 0): success."""
    log = logging.getLogger("prep")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    for i in range(10):
        try:
            if i == 3:
                int("n/a")
            log.info("shard %02d tokenized", i)
        except ValueError:
            log.error("shard %02d unreadable, giving up on it", i, exc_info=True)
    log.info("wrote 9 of 10 shards")
    for i in range(8):
        log.info("index block %d built", i)


def nccl_backend() -> None:
    """torch.distributed asked for NCCL on a CPU-only build of torch (exit 1)."""
    import torch
    import torch.distributed as dist

    print(f"torch {torch.__version__}; initialising process group", flush=True)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{sys.argv[2]}", rank=0,
                            world_size=1)


def mpi_backend() -> None:
    """torch.distributed asked for MPI on a build without it (exit 1)."""
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    print("backend=mpi world_size=1", flush=True)
    dist.init_process_group(backend="mpi")


def tf_savedmodel_truncated() -> None:
    """A SavedModel whose saved_model.pb was cut to half its size (an interrupted copy), then
    loaded (exit 1)."""
    import tensorflow as tf

    export = os.path.join(sys.argv[2], "export")

    class Scale(tf.Module):
        def __init__(self) -> None:
            self.k = tf.Variable(3.0)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def __call__(self, x):
            return self.k * x

    tf.saved_model.save(Scale(), export)
    pb = os.path.join(export, "saved_model.pb")
    size = os.path.getsize(pb)
    with open(pb, "r+b") as f:
        f.truncate(size // 2)
    print(f"copied {export} ({size // 2} of {size} bytes of saved_model.pb); loading", flush=True)
    tf.saved_model.load(export)


def frozen_graph_garbage() -> None:
    """A TF1-style frozen graph .pb that is an HTML error page (a failed download), parsed
    into a GraphDef (exit 1)."""
    import tensorflow as tf

    pb = os.path.join(sys.argv[2], "frozen_inference_graph.pb")
    with open(pb, "w") as f:
        f.write("<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>\n")
    print(f"reading {pb}", flush=True)
    gd = tf.compat.v1.GraphDef()
    with open(pb, "rb") as f:
        gd.ParseFromString(f.read())
    tf.import_graph_def(gd, name="")


def sleep_print() -> None:
    """Prints a line per half second until it is stopped."""
    for i in range(10**6):
        print(f"sample {i} encoded", flush=True)
        time.sleep(0.5)


if __name__ == "__main__":
    globals()[sys.argv[1]]()
