"""Realistic surrounding output for corpus programs, varied by a seed.

Real training logs bury the failure in config dumps, progress lines and harmless warnings; the
classifier must find the cause anyway, so every program prints some of this first.
"""

from __future__ import annotations

import random
import sys
import time
import warnings

MODELS = ["resnet50", "vit_b16", "gpt2-small", "bert-base", "unet2d", "llama-mini", "wav2vec2"]
DATASETS = ["imagenet-subset", "cifar100", "openwebtext-shard", "librispeech-100", "coco-mini"]

HARMLESS = [
    "UserWarning: The given NumPy array is not writable; PyTorch does not support non-writable "
    "tensors.",
    "FutureWarning: `torch.cuda.amp.GradScaler(args...)` is deprecated. Please use "
    "`torch.amp.GradScaler('cuda', args...)` instead.",
    "DeprecationWarning: pkg_resources is deprecated as an API",
    "UserWarning: error_if_nonfinite is set to False; inf/nan gradients will be ignored",
    "wandb: WARNING Ignoring errors in offline mode (error count = 0)",
    "INFO: retrying metrics upload after transient error (attempt 1/5) - ok",
]


def rng_for(seed: object) -> random.Random:
    return random.Random(str(seed))


def say(msg: str, err: bool = False) -> None:
    print(msg, file=sys.stderr if err else sys.stdout, flush=True)


def banner(r: random.Random) -> dict:
    cfg = {"model": r.choice(MODELS), "dataset": r.choice(DATASETS),
           "batch_size": r.choice([8, 16, 32, 64, 128]), "lr": r.choice([1e-4, 3e-4, 1e-3, 0.01]),
           "epochs": r.randint(1, 90), "seed": r.randint(0, 99999),
           "workers": r.choice([0, 2, 4, 8])}
    style = r.randint(0, 2)
    if style == 0:
        say("==> config")
        for k, v in cfg.items():
            say(f"  {k}: {v}")
    elif style == 1:
        say(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] INFO train.py:41 - starting run "
            f"{r.getrandbits(32):08x} with {cfg}")
    else:
        say(f"Namespace({', '.join(f'{k}={v!r}' for k, v in cfg.items())})")
    if r.random() < 0.4:
        say(f"Loading dataset {cfg['dataset']} ... {r.randint(1000, 2000000)} samples")
    if r.random() < 0.3:
        say(r.choice(HARMLESS), err=True)
    return cfg


def progress(r: random.Random, steps: int | None = None, loss: float | None = None) -> float:
    """Print some training progress; returns the last loss."""
    steps = r.randint(0, 40) if steps is None else steps
    loss = r.uniform(2.0, 9.0) if loss is None else loss
    every = r.choice([1, 5, 10])
    fmt = r.randint(0, 2)
    for i in range(1, steps + 1):
        loss *= r.uniform(0.93, 1.01)
        if i % every:
            continue
        if fmt == 0:
            say(f"step {i:6d} | loss {loss:.4f} | lr {r.uniform(1e-5, 1e-3):.2e} | "
                f"{r.uniform(50, 900):.1f} samples/s")
        elif fmt == 1:
            say(f"Epoch [{i // 10 + 1}] Iter [{i}/{steps}] loss={loss:.5f} "
                f"acc={r.uniform(0, 1):.3f}")
        else:
            say(f"{{'iter': {i}, 'loss': {loss:.4f}, 'grad_norm': {r.uniform(0.1, 5):.3f}}}")
    return loss


def warn_some(r: random.Random) -> None:
    """Emit real Python warnings (they go to stderr with file:line, as in real runs)."""
    if r.random() < 0.5:
        warnings.warn("this option is deprecated and will be removed", DeprecationWarning,
                      stacklevel=1)
    if r.random() < 0.3:
        warnings.warn("error handling for empty batches changed; see docs", UserWarning,
                      stacklevel=1)
