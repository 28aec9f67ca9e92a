"""Launcher of the f10m- tuning cases (issue 22's message families): an error carried by a
wrapper (a DataLoader worker, a re-raise), storage errors named by errno or wording, divergence
shown only in a training logger's own progress lines, and the false alarms around them (a run
that exits 0 after counting zero non-finite steps). Every failure is really made on the CPU
(torch CPU, a real tmpfs for a full disk); ESTALE cannot be made without NFS, so `estale`
raises OSError(ESTALE) with the C library's own strerror text (composed, and said so).

Usage: f10_msgs.py MODE ARG...
  worker KIND DIR       a DataLoader worker (num_workers=2) fails reading a sample; KIND:
                        fnf (a shard missing), full (its cache write meets a full disk),
                        estale (the shard's NFS handle went stale), ckpt (a cut torch file),
                        errno_NAME (a shared filesystem's errno NAME, e.g. errno_EREMOTEIO)
  reraise KIND DIR      a data/checkpoint layer catches the error and raises its own:
                        fnf_from (raise ... from e), full_msg (message carries str(e)),
                        estale_from, errno_NAME_from / errno_NAME_msg
  save_full DIR         torch.save of a checkpoint into a directory on a full disk
  rank KIND DIR         under torchrun: rank 1 fails as `worker KIND` (its ChildFailedError
                        summary names it); the other ranks wait for it
  nanlog STYLE CODE     a training that really diverges (learning rate far too high), logged
                        by STYLE: kv (step=N loss=nan grad=inf), table (| step | loss | grad |),
                        caps (Loss=nan | Grad=inf), then exits CODE with no exception
  tempdir               tempfile.NamedTemporaryFile for an eval cache (the case's command
                        puts every candidate directory on a full tmpfs first)
  fine STYLE            a training that stays finite and exits 0, logging a no-failure
                        wording: zero (nan_steps=0 inf_grads=0), nonan ("no NaN found"),
                        flags (nan_* options), skipped (one NaN batch skipped, then finite),
                        transient (grad_norm nan once under loss scaling, then finite)
"""

from __future__ import annotations

import errno
import math
import os
import sys

import torch


class Shards(torch.utils.data.Dataset):
    def __init__(self, kind: str, root: str) -> None:
        self.kind, self.root = kind, root

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int):
        path = os.path.join(self.root, f"shard-{i:05d}.pt")
        if self.kind == "fnf":
            with open(path, "rb") as f:
                return f.read(16)
        if self.kind == "full":  # the worker caches the decoded sample on local scratch
            with open(os.path.join(self.root, "full", f"cache-{i}-{os.getpid()}.bin"), "wb") as f:
                f.write(os.urandom(1 << 20))
                f.flush()
                os.fsync(f.fileno())
            return torch.zeros(4)
        if self.kind == "estale":  # composed (no NFS here): the C library's errno and strerror
            raise OSError(errno.ESTALE, os.strerror(errno.ESTALE), path)
        if self.kind == "ckpt":
            return torch.load(os.path.join(self.root, "cut.pt"), weights_only=True)
        if self.kind.startswith("errno_"):  # composed: a shared filesystem's errno (EREMOTEIO ...)
            code = getattr(errno, self.kind[len("errno_"):])
            raise OSError(code, os.strerror(code), path)
        raise SystemExit(f"unknown kind {self.kind}")


def prepare(kind: str, root: str) -> None:
    os.makedirs(root, exist_ok=True)
    if kind == "ckpt":
        p = os.path.join(root, "cut.pt")
        torch.save({"w": torch.randn(256, 256)}, p)
        with open(p, "r+b") as f:
            f.truncate(os.path.getsize(p) // 2)


def worker(kind: str, root: str) -> None:
    prepare(kind, root)
    print(f"epoch 0: reading {len(Shards(kind, root))} shards from {root}", flush=True)
    loader = torch.utils.data.DataLoader(Shards(kind, root), batch_size=4, num_workers=2)
    for step, _ in enumerate(loader):
        print(f"step {step}", flush=True)


def load_shard(kind: str, root: str) -> bytes:
    path = os.path.join(root, "shard-00017.pt")
    if kind.startswith("estale"):  # composed errno, as in `worker estale`
        raise OSError(errno.ESTALE, os.strerror(errno.ESTALE), path)
    if kind.startswith("errno_"):  # composed errno, as in `worker errno_NAME`
        code = getattr(errno, kind[len("errno_"):].rsplit("_", 1)[0])
        raise OSError(code, os.strerror(code), path)
    if kind.startswith("full"):
        with open(os.path.join(root, "full", "index.bin"), "wb") as f:
            for _ in range(64):
                f.write(os.urandom(1 << 16))
            f.flush()
            os.fsync(f.fileno())
        return b""
    with open(path, "rb") as f:
        return f.read()


class DatasetError(RuntimeError):
    pass


def reraise(kind: str, root: str) -> None:
    os.makedirs(root, exist_ok=True)
    print(f"building index of {root}", flush=True)
    try:
        load_shard(kind, root)
    except OSError as e:
        if kind.endswith("_msg"):
            raise DatasetError(f"could not build the shard index: {e}") from None
        raise DatasetError(f"could not read shard 17 of {root}") from e


def save_full(root: str) -> None:
    model = torch.nn.Linear(512, 512)
    print(f"epoch 3 done, saving checkpoint to {root}", flush=True)
    for n in range(1000):  # keep saving: the tmpfs fills at some checkpoint
        torch.save({"model": model.state_dict(), "step": n}, os.path.join(root, f"ckpt-{n:04d}.pt"))
        print(f"saved ckpt-{n:04d}.pt", flush=True)


def _train(steps: int, lr: float, log) -> None:
    torch.manual_seed(0)
    x = torch.randn(256, 16)
    y = x @ torch.randn(16, 1) * 10
    w = torch.zeros(16, 1, requires_grad=True)
    for step in range(1, steps + 1):
        loss = ((x @ w - y) ** 2).mean()
        loss.backward()
        grad = w.grad.norm().item()
        with torch.no_grad():
            w -= lr * w.grad
            w.grad.zero_()
        log(step, loss.item(), grad)


def _fmt(v: float) -> str:
    return f"{v:.4f}" if math.isfinite(v) else str(v)


def nanlog(style: str, code: int) -> None:
    def log(step: int, loss: float, grad: float) -> None:
        if step % 10:
            return
        if style == "kv":
            print(f"step={step} loss={_fmt(loss)} grad={_fmt(grad)} lr=0.9", flush=True)
        elif style == "table":
            print(f"| {step:5d} | {_fmt(loss):>10} | {_fmt(grad):>10} |", flush=True)
        else:
            print(f"Epoch 1 Step {step} | Loss={_fmt(loss)} | Grad={_fmt(grad)}", flush=True)
    if style == "table":
        print("|  step |       loss |       grad |\n|-------|------------|------------|",
              flush=True)
    _train(400, 0.9, log)  # the update overshoots: the loss grows to inf and then nan
    print("training finished", flush=True)
    sys.exit(code)


def fine(style: str) -> None:
    if style == "flags":
        print("config: Namespace(lr=0.01, detect_nan=True, nan_to_num=True, nan_policy='skip', "
              "skip_nan_batches=True)", flush=True)
    skipped = [0]

    def log(step: int, loss: float, grad: float) -> None:
        if style == "skipped" and step == 7:  # one batch with a NaN label: the guard skips it
            bad = torch.tensor([1.0, float("nan")]).mean().item()
            print(f"WARNING: loss is {bad} at step {step}, skipping batch", flush=True)
            skipped[0] += 1
            return
        if step % 20:
            return
        if style == "zero":
            print(f"step={step} loss={_fmt(loss)} nan_steps=0 inf_grads=0 skipped_nonfinite=0",
                  flush=True)
        elif style == "transient" and step == 20:
            print(f"iter {step}: loss: {_fmt(loss)}, grad_norm: nan, loss_scale: 32768.0",
                  flush=True)
        else:
            print(f"iter {step}: loss: {_fmt(loss)}, grad_norm: {_fmt(grad)}", flush=True)
    _train(200, 0.05, log)
    if style == "nonan":
        print("checked 200 steps: no NaN found in loss or gradients", flush=True)
    if style == "zero":
        print("summary: non-finite steps: 0, NaN losses: 0, Inf gradients: 0", flush=True)
    if style == "skipped":
        print(f"done: {skipped[0]} batch skipped for a non-finite loss, training completed",
              flush=True)
    print("training complete", flush=True)


def main() -> None:
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "worker":
        worker(args[0], args[1])
    elif mode == "reraise":
        reraise(args[0], args[1])
    elif mode == "rank":
        if os.environ.get("RANK") == "1":
            worker(args[0], args[1])
        import time
        time.sleep(30)
    elif mode == "save_full":
        save_full(args[0])
    elif mode == "nanlog":
        nanlog(args[0], int(args[1]))
    elif mode == "tempdir":
        import tempfile
        print("writing the eval cache", flush=True)
        with tempfile.NamedTemporaryFile() as f:
            f.write(b"preds")
    elif mode == "fine":
        fine(args[0])
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
