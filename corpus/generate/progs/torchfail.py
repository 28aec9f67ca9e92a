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


def _model(kind: int) -> torch.nn.Module:
    d = R.choice([8, 16, 32])
    if kind == 0:
        return torch.nn.Linear(d, 1)
    if kind == 1:
        return torch.nn.Sequential(torch.nn.Linear(d, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    return torch.nn.Sequential(torch.nn.Linear(d, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32),
                               torch.nn.Tanh(), torch.nn.Linear(32, 1))


def _data(model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    d = next(model.parameters()).shape[1]
    x = torch.randn(256, d) * R.choice([10.0, 30.0, 100.0])  # unnormalised features
    return x, x.sum(1, keepdim=True) * 3 + torch.randn(256, 1)


# ---------------------------------------------------------------- nan_divergence
def _diverge(check: str) -> None:
    model = _model(R.randint(0, 2))
    x, y = _data(model)
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


def nan_raise():
    _diverge("raise")


def nan_assert():
    _diverge("assert")


def nan_exit():
    _diverge("exit")


def nan_clip():
    _diverge("clip")


def nan_params():
    _diverge("params")


def nan_anomaly():
    torch.autograd.set_detect_anomaly(True)
    w = torch.nn.Parameter(torch.randn(16))
    for step in range(1, 6):
        x = torch.randn(16) - (step * 0.5)
        loss = (torch.sqrt(x * w) if R.random() < 0.5 else torch.log(x * w)).sum()
        say(f"iter {step} loss {loss.item():.4f}")
        loss.backward()


def nan_numpy():
    import numpy as np
    np.seterr(all="raise")
    w = np.ones(8) * R.uniform(1.5, 3.0)
    for step in range(1, 2000):
        w = w * w * R.uniform(1.1, 2.0)
        if step % 2 == 0:
            say(f"[{step}] |w| = {np.abs(w).max():.3e}")


NAN = [nan_raise, nan_assert, nan_exit, nan_clip, nan_params, nan_anomaly, nan_numpy]


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


def _loader(how: str) -> None:
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


def dl_kill():
    _loader("kill")


def dl_segv():
    _loader("segv")


def dl_bus():
    _loader("bus")


def dl_exit():
    _loader("exit")


def dl_term():
    _loader("term")


def dl_abort():
    _loader("abort")


DL = [dl_kill, dl_segv, dl_bus, dl_exit, dl_term, dl_abort, dl_kill]


def dl_raise():
    _loader("raise")


# ---------------------------------------------------------------- checkpoint_corrupt
def _ckpt(legacy: bool = False) -> Path:
    p = WORK / R.choice(["last.pt", "checkpoint_epoch3.pth", "model_best.pt", "ckpt-2000.pt"])
    model = torch.nn.Sequential(torch.nn.Linear(R.choice([16, 64, 256]), 128),
                                torch.nn.Linear(128, 10))
    torch.save({"model": model.state_dict(), "epoch": R.randint(1, 50)}, p,
               _use_new_zipfile_serialization=not legacy)
    return p


def _load(p: Path) -> None:
    say(f"=> resuming from {p}")
    state = torch.load(p, map_location="cpu", weights_only=R.random() < 0.5)
    say(f"=> loaded epoch {state['epoch']}")


def ck_truncate():
    p = _ckpt()
    data = p.read_bytes()
    p.write_bytes(data[: int(len(data) * R.uniform(0.2, 0.9))])
    _load(p)


def ck_truncate_stream():
    import io
    p = _ckpt()
    data = p.read_bytes()
    p.write_bytes(data[: int(len(data) * R.uniform(0.2, 0.9))])
    say(f"=> fetching {p.name} into memory")
    torch.load(io.BytesIO(p.read_bytes()), map_location="cpu")


def ck_truncate_legacy():
    p = _ckpt(legacy=True)
    data = p.read_bytes()
    p.write_bytes(data[: int(len(data) * R.uniform(0.3, 0.95))])
    _load(p)


def ck_empty():
    p = _ckpt()
    p.write_bytes(b"")
    _load(p)


def ck_html():
    p = _ckpt()
    p.write_text("<html><head><title>404 Not Found</title></head><body>not found</body></html>")
    _load(p)


def ck_lfs():
    p = _ckpt()
    p.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:"
                 + f"{R.getrandbits(256):064x}" + "\nsize 104857600\n")
    _load(p)


def ck_garbage():
    p = _ckpt()
    p.write_bytes(os.urandom(R.randint(100, 5000)))
    _load(p)


def ck_header():
    p = _ckpt()
    data = bytearray(p.read_bytes())
    data[0:4] = os.urandom(4)
    p.write_bytes(bytes(data))
    _load(p)


def ck_zero_tail():
    p = _ckpt()
    data = bytearray(p.read_bytes())
    n = R.randint(64, 512)
    data[-n:] = bytes(n)  # the central directory overwritten by a torn write
    p.write_bytes(bytes(data))
    _load(p)


def ck_pickle():
    import pickle
    p = WORK / "optimizer_state.pkl"
    p.write_bytes(pickle.dumps({"step": 5, "m": list(range(5000))})[: R.randint(100, 2000)])
    say(f"restoring optimizer state from {p}")
    with open(p, "rb") as f:
        pickle.load(f)


CKPT = [ck_truncate, ck_truncate_stream, ck_truncate_legacy, ck_empty, ck_html, ck_lfs,
        ck_garbage, ck_header, ck_zero_tail, ck_pickle]


# ---------------------------------------------------------------- device_mismatch
META = torch.device("meta")


def dm_linear():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    with torch.device("meta"):  # "initialised lazily" and never materialised
        head = torch.nn.Linear(4, 2)
    model.append(head)
    model(torch.randn(R.randint(2, 64), 16))


def dm_embedding_target():
    logits = torch.randn(8, 5, device=META)
    torch.nn.functional.cross_entropy(logits, torch.randint(0, 5, (8,)))


def dm_cat():
    feats = [torch.randn(4, 8), torch.empty(4, 8, device=META)]
    torch.cat(feats, dim=R.choice([0, 1]))


def dm_addmm():
    torch.addmm(torch.zeros(2, 2, device=META), torch.randn(2, 3), torch.randn(3, 2))


def dm_lstm():
    rnn = torch.nn.LSTM(8, R.choice([16, 32]), num_layers=R.choice([1, 2])).to(META)
    rnn(torch.randn(5, 3, 8))


def dm_index_add():
    counts = torch.zeros(10)
    counts.index_add_(0, torch.tensor([1, 3]), torch.ones(2, device=META))


def dm_attention():
    attn = torch.nn.MultiheadAttention(16, 4).to(META)
    q = torch.randn(6, 2, 16)
    attn(q, q, q)


def dm_layernorm():
    ln = torch.nn.LayerNorm(16).to(META)
    ln(torch.randn(4, 16))


def dm_loss():
    torch.nn.functional.mse_loss(torch.randn(7, device=META), torch.randn(7))


def dm_where():
    mask = torch.rand(6) > 0.5
    torch.where(mask, torch.zeros(6, device=META), torch.ones(6))


def dm_lerp():
    ema = torch.zeros(10)
    ema.lerp_(torch.ones(10, device=META), 0.1)


DM = [dm_linear, dm_embedding_target, dm_cat, dm_addmm, dm_lstm, dm_layernorm, dm_loss, dm_where,
      dm_lerp, dm_index_add, dm_attention]

KINDS = {"nan_divergence": NAN, "dataloader_worker": DL, "checkpoint_corrupt": CKPT,
         "device_mismatch": DM, "dataloader_raise": [dl_raise]}


def main() -> None:
    banner(R)
    if KIND != "nan_divergence":
        progress(R, R.randint(0, 25))
    variants = KINDS[KIND]
    variants[VARIANT % len(variants)]()


if __name__ == "__main__":
    main()
