"""Memory, shared-memory, GPU-backend and short-read failures of the families held-out set 6
missed, run for real on a CPU: `f6_mem.py SCENARIO [ARG ...]` (tuning-corpus cases f6m-*).

Each scenario does some ordinary work first and then fails by itself: an address-space limit
(RLIMIT_AS, what `prlimit --as` sets) that makes a library's allocator fail, a 2 MiB /dev/shm
in a private mount namespace (run under `unshare -m`), a CPU-only build asked for its GPU
learner, numba asked for CUDA on a machine without a driver, a model file cut short.
pyarrow, LightGBM, numba and joblib come from /opt/gpualert-ho6/site-packages.
"""

from __future__ import annotations

import functools
import os
import resource
import sys

import progkit
from progkit import ARG, say

sys.path.append("/opt/gpualert-ho6/site-packages")
steps = functools.partial(progkit.steps, loss=1.7, rate=210, more=7, unit="rows/s")


def cap_address_space(extra_mb: int) -> None:
    """Limit this process's address space to what it maps now plus `extra_mb`."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[0])
    now = pages * resource.getpagesize()
    lim = now + (extra_mb << 20)
    resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    say(f"address space capped at {lim >> 20} MiB")


# ---- host memory: Arrow's allocator under an address-space limit ----

def arrow_stream_grow() -> None:
    """An Arrow output stream that grows past the limit: its buffer's realloc fails."""
    import pyarrow as pa
    steps("export")
    cap_address_space(256)
    sink = pa.BufferOutputStream()
    chunk = b"\x01" * (32 << 20)
    for i in range(64):
        sink.write(chunk)
        if i % 4 == 0:
            say(f"serialized {(i + 1) * 32} MiB of the feature table")
    say("done")


def arrow_table_concat() -> None:
    """Concatenating record batches into one table column: Arrow's pool cannot allocate."""
    import numpy as np
    import pyarrow as pa
    steps("merge")
    parts = [pa.array(np.arange(4 << 20, dtype=np.int64)) for _ in range(6)]
    say(f"{len(parts)} shards of {len(parts[0])} rows")
    cap_address_space(96)
    merged = pa.concat_arrays(parts)
    say("merged", len(merged))


# ---- /dev/shm: DataLoader workers with a tiny shared-memory filesystem ----

class SharedSamples:
    """A dataset that moves each decoded sample into shared memory itself (share_memory_(),
    as caches shared between workers do): 4 MiB each, more than the 2 MiB /dev/shm."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int):
        import torch
        return torch.full((1024, 1024), float(i)).share_memory_()


def loader_no_collate() -> None:
    """batch_size=None (no collate): the worker's own share_memory_() fails in /dev/shm."""
    import torch
    from torch.utils.data import DataLoader
    torch.manual_seed(0)
    steps("warmup")
    dl = DataLoader(SharedSamples(), batch_size=None, num_workers=2)
    for i, x in enumerate(dl):
        say(f"sample {i}: mean {x.mean().item():.2f}")


# ---- a library without its GPU backend ----

def lgb_sklearn_gpu() -> None:
    """LightGBM's scikit-learn API asked for the OpenCL GPU learner on a CPU build."""
    import lightgbm as lgb
    import numpy as np
    rng = np.random.default_rng(3)
    x = rng.normal(size=(1500, 12))
    y = x[:, 0] * 2 + rng.normal(size=1500)
    steps("features")
    say("fitting LGBMRegressor(device='gpu')")
    lgb.LGBMRegressor(device="gpu", n_estimators=20, verbose=-1).fit(x, y)


def numba_cuda_kernel() -> None:
    """A @cuda.jit kernel launched on a machine with no CUDA driver."""
    import numpy as np
    from numba import cuda

    @cuda.jit
    def scale(a, k):
        i = cuda.grid(1)
        if i < a.size:
            a[i] *= k

    steps("prep")
    a = np.arange(4096, dtype=np.float32)
    say("launching scale kernel")
    scale[16, 256](a, 2.0)
    say("sum", float(a.sum()))


# ---- short reads of serialized arrays and models ----

def npy_cut_header(d: str) -> None:
    """An .npy cache file cut inside its header (a copy interrupted)."""
    import numpy as np
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "embeddings.npy")
    np.save(path, np.random.default_rng(0).normal(size=(500, 64)).astype(np.float32))
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:40])
    steps("index")
    say(f"loading {path}")
    emb = np.load(path)
    say(emb.shape)


def lgb_model_str_cut(d: str) -> None:
    """A LightGBM model saved as text, cut in the middle of its trees, loaded back."""
    import lightgbm as lgb
    import numpy as np
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(5)
    x = rng.normal(size=(800, 6))
    y = (x[:, 1] > 0).astype(int)
    b = lgb.train({"objective": "binary", "verbose": -1}, lgb.Dataset(x, y), 15)
    text = b.model_to_string()
    cut = text[: text.index("Tree=7")] + "Tree=7\nnum_leaves=31\nnum_cat=0\nsplit_fea"
    path = os.path.join(d, "ranker.txt")
    with open(path, "w") as f:
        f.write(cut)
    steps("serve")
    say(f"loading {path}")
    booster = lgb.Booster(model_file=path)
    say(booster.num_trees())


MODES = {f.__name__: f for f in (arrow_stream_grow, arrow_table_concat, loader_no_collate,
                                  lgb_sklearn_gpu, numba_cuda_kernel)}
MODES_ARG = {f.__name__: f for f in (npy_cut_header, lgb_model_str_cut)}

if __name__ == "__main__":
    name = sys.argv[1]
    if name in MODES_ARG:
        MODES_ARG[name](ARG)
    else:
        MODES[name]()
