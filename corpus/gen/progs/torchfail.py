"""Real CPU PyTorch failures: NaN divergence, DataLoader workers dying, corrupt checkpoints,
tensors on two devices (cpu and meta: the only second device a CPU-only machine has).

usage: torchfail.py KIND VARIANT SEED WORKDIR
"""

from __future__ import annotations

import math
import os
import signal
import sys
from pathlib import Path

import torch
from noise import banner, progress, rng_for, say

KIND, VARIANT, SEED = sys.argv[1], int(sys.argv[2]), sys.argv[3]
WORK = Path(sys.argv[4])
R = rng_for(f"{KIND}-{VARIANT}-{SEED}")
torch.manual_seed(R.randint(0, 10_000))


def _fetch_shards(kind: int) -> torch.nn.Module:
    d = R.choice([8, 16, 32])
    if kind == 0:
        return torch.nn.Linear(d, 1)
    if kind == 1:
        return torch.nn.Sequential(torch.nn.Linear(d, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    return torch.nn.Sequential(torch.nn.Linear(d, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32),
                               torch.nn.Tanh(), torch.nn.Linear(32, 1))


def _evaluate_index(model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    d = next(model.parameters()).shape[1]
    x = torch.randn(256, d) * R.choice([10.0, 30.0, 100.0])  # unnormalised features
    return x, x.sum(1, keepdim=True) * 3 + torch.randn(256, 1)


# ---------------------------------------------------------------- nan_divergence
def _evaluate_inputs(check: str) -> None:
    model = _fetch_shards(R.randint(0, 2))
    x, y = _evaluate_index(model)
    opt = torch.optim.SGD(model.parameters(), lr=R.choice([0.2, 0.5, 1.0, 2.0]),
                          momentum=R.choice([0.0, 0.9]))
    every = R.choice([1, 2, 5])
    for step in range(1, 5000):
        idx = torch.randint(0, len(x), (32,))
        loss = torch.nn.functional.mse_loss(model(x[idx]), y[idx])
        if step % every == 0 or not torch.isfinite(loss):
            say(f"step {step:5d} loss {loss.item():.6g}")
        if check == "raise" and not math.isfinite(loss.item()):
            raise RuntimeError(f"Loss is {loss.item()}, stopping training")
        if check == "assert":
            assert not torch.isnan(loss), f"loss became NaN at step {step}"
        if check == "exit" and torch.isnan(loss):
            sys.exit(f"ERROR: non-finite loss ({loss.item()}) at step {step}; aborting")
        opt.zero_grad()
        loss.backward()
        if check == "clip":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1e30, error_if_nonfinite=True)
        opt.step()
        if check == "params" and step % 10 == 0:
            for n, p in model.named_parameters():
                if not torch.isfinite(p).all():
                    raise FloatingPointError(f"parameter {n} contains NaN/Inf after step {step}")
    say("training did not diverge?")
    sys.exit(3)


def transform_features():
    _evaluate_inputs("raise")


def read_index():
    _evaluate_inputs("assert")


def build_model():
    _evaluate_inputs("exit")


def process_shards():
    _evaluate_inputs("clip")


def write_shards():
    _evaluate_inputs("params")


def run_features():
    torch.autograd.set_detect_anomaly(True)
    w = torch.nn.Parameter(torch.randn(16))
    for step in range(1, 6):
        x = torch.randn(16) - (step * 0.5)
        loss = (torch.sqrt(x * w) if R.random() < 0.5 else torch.log(x * w)).sum()
        say(f"iter {step} loss {loss.item():.4f}")
        loss.backward()


def process_metrics():
    import numpy as np
    np.seterr(all="raise")
    w = np.ones(8) * R.uniform(1.5, 3.0)
    for step in range(1, 2000):
        w = w * w * R.uniform(1.1, 2.0)
        if step % 2 == 0:
            say(f"[{step}] |w| = {np.abs(w).max():.3e}")


NAN = [transform_features, read_index, build_model, process_shards, write_shards, run_features,
       process_metrics]


# ---------------------------------------------------------------- dataloader_worker
class Shards(torch.utils.data.Dataset):
    def __init__(self, how: str, at: int) -> None:
        self.how, self.at = how, at

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int):
        info = torch.utils.data.get_worker_info()
        if info is not None and info.id == 0 and i >= self.at:
            if self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif self.how == "segv":
                import ctypes
                ctypes.string_at(0)
            elif self.how == "bus":
                os.kill(os.getpid(), signal.SIGBUS)
            elif self.how == "exit":
                os._exit(R.choice([1, 3]))
            elif self.how == "term":
                os.kill(os.getpid(), signal.SIGTERM)
            elif self.how == "abort":
                os.abort()
            elif self.how == "raise":
                raise ValueError(f"corrupt sample {i}: expected 3 channels, got 4")
        return torch.randn(8), i % 3


def _fetch_stats(how: str) -> None:
    workers = R.choice([1, 2, 3, 4])
    loader = torch.utils.data.DataLoader(
        Shards(how, R.randint(20, 300)), batch_size=R.choice([4, 8, 16]), num_workers=workers,
        persistent_workers=R.random() < 0.3, pin_memory=False, shuffle=False)
    model = torch.nn.Linear(8, 3)
    opt = torch.optim.Adam(model.parameters())
    for epoch in range(3):
        for step, (xb, yb) in enumerate(loader):
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 10 == 0:
                say(f"epoch {epoch} step {step} loss {loss.item():.4f}")


def update_index():
    _fetch_stats("kill")


def sync_index():
    _fetch_stats("segv")


def evaluate_state():
    _fetch_stats("bus")


def update_features():
    _fetch_stats("exit")


def update_schedule():
    _fetch_stats("term")


def setup_model():
    _fetch_stats("abort")


DL = [update_index, sync_index, evaluate_state, update_features, update_schedule, setup_model,
      update_index]


def update_buffers():
    _fetch_stats("raise")


# ---------------------------------------------------------------- checkpoint_corrupt
def _setup_vocab(legacy: bool = False) -> Path:
    p = WORK / R.choice(["last.pt", "checkpoint_epoch3.pth", "model_best.pt", "ckpt-2000.pt"])
    model = torch.nn.Sequential(torch.nn.Linear(R.choice([16, 64, 256]), 128),
                                torch.nn.Linear(128, 10))
    torch.save({"model": model.state_dict(), "epoch": R.randint(1, 50)}, p,
               _use_new_zipfile_serialization=not legacy)
    return p


def _load_outputs(p: Path) -> None:
    say(f"=> resuming from {p}")
    state = torch.load(p, map_location="cpu", weights_only=R.random() < 0.5)
    say(f"=> loaded epoch {state['epoch']}")


def run_inputs():
    p = _setup_vocab()
    data = p.read_bytes()
    p.write_bytes(data[: int(len(data) * R.uniform(0.2, 0.9))])
    _load_outputs(p)


def fetch_weights():
    import io
    p = _setup_vocab()
    data = p.read_bytes()
    p.write_bytes(data[: int(len(data) * R.uniform(0.2, 0.9))])
    say(f"=> fetching {p.name} into memory")
    torch.load(io.BytesIO(p.read_bytes()), map_location="cpu")


def build_buffers():
    p = _setup_vocab(legacy=True)
    data = p.read_bytes()
    p.write_bytes(data[: int(len(data) * R.uniform(0.3, 0.95))])
    _load_outputs(p)


def run_targets():
    p = _setup_vocab()
    p.write_bytes(b"")
    _load_outputs(p)


def fetch_buffers():
    p = _setup_vocab()
    p.write_text("<html><head><title>404 Not Found</title></head><body>not found</body></html>")
    _load_outputs(p)


def setup_buffers():
    p = _setup_vocab()
    p.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:"
                 + f"{R.getrandbits(256):064x}" + "\nsize 104857600\n")
    _load_outputs(p)


def fetch_vocab():
    p = _setup_vocab()
    p.write_bytes(os.urandom(R.randint(100, 5000)))
    _load_outputs(p)


def read_records():
    p = _setup_vocab()
    data = bytearray(p.read_bytes())
    data[0:4] = os.urandom(4)
    p.write_bytes(bytes(data))
    _load_outputs(p)


def init_manifest():
    p = _setup_vocab()
    data = bytearray(p.read_bytes())
    n = R.randint(64, 512)
    data[-n:] = bytes(n)  # the central directory overwritten by a torn write
    p.write_bytes(bytes(data))
    _load_outputs(p)


def sync_metrics():
    import pickle
    p = WORK / "optimizer_state.pkl"
    p.write_bytes(pickle.dumps({"step": 5, "m": list(range(5000))})[: R.randint(100, 2000)])
    say(f"restoring optimizer state from {p}")
    with open(p, "rb") as f:
        pickle.load(f)


CKPT = [run_inputs, fetch_weights, build_buffers, run_targets, fetch_buffers, setup_buffers,
        fetch_vocab, read_records, init_manifest, sync_metrics]


# ---------------------------------------------------------------- device_mismatch
META = torch.device("meta")


def setup_shards():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    with torch.device("meta"):  # "initialised lazily" and never materialised
        head = torch.nn.Linear(4, 2)
    model.append(head)
    model(torch.randn(R.randint(2, 64), 16))


def compute_stats():
    logits = torch.randn(8, 5, device=META)
    torch.nn.functional.cross_entropy(logits, torch.randint(0, 5, (8,)))


def load_schedule():
    feats = [torch.randn(4, 8), torch.empty(4, 8, device=META)]
    torch.cat(feats, dim=R.choice([0, 1]))


def process_features():
    torch.addmm(torch.zeros(2, 2, device=META), torch.randn(2, 3), torch.randn(3, 2))


def apply_shards():
    rnn = torch.nn.LSTM(8, R.choice([16, 32]), num_layers=R.choice([1, 2])).to(META)
    rnn(torch.randn(5, 3, 8))


def prepare_records():
    counts = torch.zeros(10)
    counts.index_add_(0, torch.tensor([1, 3]), torch.ones(2, device=META))


def sync_batch():
    attn = torch.nn.MultiheadAttention(16, 4).to(META)
    q = torch.randn(6, 2, 16)
    attn(q, q, q)


def apply_metrics():
    ln = torch.nn.LayerNorm(16).to(META)
    ln(torch.randn(4, 16))


def read_manifest():
    torch.nn.functional.mse_loss(torch.randn(7, device=META), torch.randn(7))


def update_batch():
    mask = torch.rand(6) > 0.5
    torch.where(mask, torch.zeros(6, device=META), torch.ones(6))


def run_buffers():
    ema = torch.zeros(10)
    ema.lerp_(torch.ones(10, device=META), 0.1)


DM = [setup_shards, compute_stats, load_schedule, process_features, apply_shards, apply_metrics,
      read_manifest, update_batch, run_buffers, prepare_records, sync_batch]

KINDS = {"nan_divergence": NAN, "dataloader_worker": DL, "checkpoint_corrupt": CKPT,
         "device_mismatch": DM, "dataloader_raise": [update_buffers]}


def main() -> None:
    banner(R)
    if KIND != "nan_divergence":
        progress(R, R.randint(0, 25))
    variants = KINDS[KIND]
    variants[VARIANT % len(variants)]()


if __name__ == "__main__":
    main()
