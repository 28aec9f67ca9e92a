"""Held-out set 9's Python jobs: `ho9_jobs.py MODE [ARG ...]`, each failing (or not) by itself.

New ground for the held-out sets: torch.multiprocessing.spawn as the launcher (gloo), Lightning
Fabric, concurrent.futures.ProcessPoolExecutor, SciPy (linalg, io.loadmat/savemat, optimize),
msgpack checkpoints (the Flax serialization format), einops, fsspec's HTTP filesystem (aiohttp),
torch.profiler traces, TCPStore rendezvous, and per-process limits (RLIMIT_NOFILE).
"""

from __future__ import annotations

import os
import sys
import time

ARGS = sys.argv[2:]


def say(*a: object) -> None:
    print(*a, flush=True)


def arg(i: int, default: str = "") -> str:
    return ARGS[i] if len(ARGS) > i else default


def _segv() -> None:
    import ctypes
    ctypes.string_at(0)


# ---------------------------------------------------------------- python_exception

def einops_shape() -> None:
    import einops
    import torch
    x = torch.randn(8, 3, 224, 224)
    say(f"batch {tuple(x.shape)}, patch size 16")
    p = einops.rearrange(x, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=16, p2=16)
    say(f"patches {tuple(p.shape)}")
    y = torch.randn(8, 3, 220, 220)  # the eval loader's resize differs
    say("eval batch", tuple(y.shape))
    einops.rearrange(y, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=16, p2=16)


def scipy_chol() -> None:
    import numpy as np
    import scipy.linalg
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 128))  # fewer samples than features: a singular covariance
    cov = np.cov(x, rowvar=False)
    say(f"GP kernel {cov.shape}, jitter 0")
    scipy.linalg.cho_factor(cov - 1e-3 * np.eye(128))


def ppe_raise() -> None:
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(2) as ex:
        for i, n in enumerate(ex.map(_shard_rows, range(6))):
            say(f"shard {i}: {n} rows")


def _shard_rows(i: int) -> int:
    if i == 4:
        meta = {"rows": 1000, "source": "s3"}
        return meta["num_rows"]
    return 1000 + i


def nofile() -> None:
    import glob
    src = arg(0)
    files = sorted(glob.glob(os.path.join(src, "*.bin")))
    say(f"opening {len(files)} shard files")
    handles = [open(f, "rb") for f in files]  # noqa: SIM115 (kept open: the job holds them all)
    say(f"opened {len(handles)}")


# ---------------------------------------------------------------- mp.spawn (one log, many ranks)

def _init(rank: int, world: int, port: str, timeout: float = 30) -> None:
    import datetime

    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout))


def _spawn_worker(rank: int, world: int, port: str, what: str, bad: int) -> None:
    import torch
    import torch.distributed as dist
    _init(rank, world, port, 12 if what == "timeout" else 1800)
    print(f"[rank {rank}] joined, world {world}", flush=True)
    t = torch.ones(4)
    for step in range(3):
        dist.all_reduce(t)
        print(f"[rank {rank}] step {step} ok", flush=True)
        time.sleep(0.5)
    if rank == bad:
        if what == "raise":
            vocab = {"<pad>": 0, "<s>": 1}
            print(vocab["<mask>"])
        elif what == "segv":
            _segv()
        elif what in ("timeout", "hang"):
            time.sleep(600)
        elif what == "cuda":
            torch.zeros(4, device=f"cuda:{rank}")
        elif what == "nan":
            loss = torch.tensor(float("inf")) - torch.tensor(float("inf"))
            print(f"[rank {rank}] step 3 loss {loss.item()}", flush=True)
            if torch.isnan(loss):
                raise FloatingPointError(f"rank {rank}: loss is NaN at step 3, stopping")
        elif what == "dl":
            _dl_run("kill", "fork", rank)
    for step in range(3, 6):
        dist.all_reduce(t)
        print(f"[rank {rank}] step {step} ok", flush=True)
    dist.destroy_process_group()


def spawn() -> None:
    """ARG0 what the bad rank does, ARG1 the bad rank, ARG2 world size, ARG3 port."""
    import torch.multiprocessing as mp
    world = int(arg(2, "2"))
    say(f"launching {world} workers with torch.multiprocessing.spawn")
    mp.spawn(_spawn_worker, args=(world, arg(3, "29911"), arg(0), int(arg(1, "1"))),
             nprocs=world, join=True)
    say("all workers finished")


# ---------------------------------------------------------------- file_not_found / perms / full

def loadmat() -> None:
    import scipy.io
    say(f"loading features from {arg(0)}")
    m = scipy.io.loadmat(arg(0))
    say(sorted(k for k in m if not k.startswith("__")))


def savemat() -> None:
    import numpy as np
    import scipy.io
    n = int(arg(1, "64"))
    emb = np.random.default_rng(0).standard_normal((n, 512)).astype("float32")
    say(f"saving embeddings {emb.shape} to {arg(0)}")
    scipy.io.savemat(arg(0), {"emb": emb, "ids": np.arange(n)})
    say("saved")


def _state(n: int) -> dict:
    import numpy as np
    rng = np.random.default_rng(0)
    return {"step": 4000, "params": {f"layer_{i}": rng.standard_normal(n).astype("float32")
                                     .tobytes() for i in range(8)}}


def msgpack_save() -> None:
    import msgpack
    n = int(arg(1, "4096"))
    say(f"writing checkpoint {arg(0)}")
    with open(arg(0), "wb") as f:
        f.write(msgpack.packb(_state(n)))
    say("checkpoint written")


def msgpack_load() -> None:
    import msgpack
    say(f"restoring params from {arg(0)}")
    with open(arg(0), "rb") as f:
        state = msgpack.unpackb(f.read())
    say(f"restored step {state['step']}, {len(state['params'])} layers")


def profile() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)])
    x = torch.randn(64, 256)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(int(arg(1, "30"))):
            model(x).sum().backward()
    say(prof.key_averages().table(sort_by="cpu_time_total", row_limit=5))
    say(f"exporting trace to {arg(0)}")
    prof.export_chrome_trace(arg(0))
    say("trace written")


def fsspec_read() -> None:
    import fsspec
    url = arg(0)
    say(f"streaming shard list from {url}")
    fs = fsspec.filesystem("http", client_kwargs={"timeout": __import__("aiohttp").ClientTimeout(
        total=8)})
    with fs.open(url, "rb") as f:
        say(len(f.read()))


def fsspec_local() -> None:
    import fsspec
    say(f"reading manifest {arg(0)}")
    with fsspec.open(arg(0), "rt") as f:
        say(f.readline())


# ---------------------------------------------------------------- host_oom

def scipy_dense() -> None:
    import numpy as np
    import scipy.sparse
    rng = np.random.default_rng(0)
    n, nnz = 60000, 400000
    a = scipy.sparse.csr_matrix((np.ones(nnz, "float32"), (rng.integers(0, n, nnz),
                                                           rng.integers(0, n, nnz))), (n, n))
    say(f"adjacency {a.shape}, nnz {a.nnz}")
    dense = a.toarray()
    say(dense.sum())


def _big(i: int) -> int:
    import numpy as np
    say(f"worker: building feature block {i}")
    blk = np.empty((i + 1) * 900_000_000 // 8)
    return int(blk.size)


def ppe_mem() -> None:
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(2) as ex:
        for n in ex.map(_big, range(4)):
            say(f"block of {n} floats")


# ---------------------------------------------------------------- segfault / killed / hang

def _crash(i: int) -> int:
    if i == 3:
        _segv()
    time.sleep(0.3)
    return i * i


def ppe_segv() -> None:
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(2) as ex:
        for i, n in enumerate(ex.map(_crash, range(8))):
            say(f"tile {i}: {n}")


def fabric_segv() -> None:
    import faulthandler
    faulthandler.enable()
    import lightning_fabric as L
    import torch
    fabric = L.Fabric(accelerator="cpu", devices=1)
    fabric.launch()
    model = fabric.setup(torch.nn.Linear(32, 4))
    say("fabric ready, loading custom kernel")
    say(model(torch.randn(2, 32)).shape)
    _segv()


def ppe_loop() -> None:
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(2) as ex:
        for r in range(400):
            say(f"round {r}: {sum(ex.map(abs, range(-100, 100)))}")
            time.sleep(2)


def store_wait() -> None:
    import datetime

    import torch.distributed as dist
    port = int(arg(0, "29931"))
    say(f"rank 0: TCPStore on port {port}, waiting for the peers' 'ready' keys")
    store = dist.TCPStore("127.0.0.1", port, 2, True, timeout=datetime.timedelta(seconds=10),
                          wait_for_workers=False)
    store.set("ready/0", "1")
    store.wait(["ready/0", "ready/1"])
    say("all ready")


# ---------------------------------------------------------------- Fabric / DataLoader

class _DS:
    def __init__(self, how: str = "") -> None:
        self.how = how

    def __len__(self) -> int:
        return 256

    def __getitem__(self, i: int):
        import torch
        if i == 130 and self.how:
            if self.how == "segv":
                _segv()
            elif self.how == "abort":
                os.abort()
            elif self.how == "kill":
                os.kill(os.getpid(), 9)
            elif self.how == "mem":
                import numpy as np
                np.ones(6_000_000_000 // 8)
        return torch.randn(32), torch.randint(0, 4, ()).long()


def _dl_run(how: str, ctx: str, rank: int = 0) -> None:
    import torch
    dl = torch.utils.data.DataLoader(_DS(how), batch_size=16, num_workers=2,
                                     multiprocessing_context=ctx)
    for i, (x, _y) in enumerate(dl):
        print(f"[rank {rank}] batch {i} {tuple(x.shape)}", flush=True)


def dl() -> None:
    _dl_run(arg(0), arg(1, "fork"))


def fabric_dl() -> None:
    import lightning_fabric as L
    import torch
    fabric = L.Fabric(accelerator="cpu", devices=1)
    fabric.launch()
    model = torch.nn.Linear(32, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = fabric.setup(model, opt)
    loader = fabric.setup_dataloaders(torch.utils.data.DataLoader(_DS(arg(0)), batch_size=16,
                                                                  num_workers=2))
    for i, (x, y) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        fabric.backward(loss)
        opt.step()
        opt.zero_grad()
        fabric.print(f"step {i} loss {loss.item():.4f}")


def fabric_cuda() -> None:
    import lightning_fabric as L
    say("fabric: 1 x cuda, bf16-mixed")
    fabric = L.Fabric(accelerator="cuda", devices=1, precision="bf16-mixed")
    fabric.launch()


def fabric_nan() -> None:
    """ARG0 guard|exit0: the loop diverges (lr far too high) and stops, raising or returning."""
    import lightning_fabric as L
    import torch
    torch.manual_seed(0)
    fabric = L.Fabric(accelerator="cpu", devices=1)
    fabric.launch()
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=float(arg(1, "5.0")))
    model, opt = fabric.setup(model, opt)
    x, y = torch.randn(256, 16) * 10, torch.randn(256, 1) * 10
    for step in range(200):
        loss = torch.nn.functional.mse_loss(model(x), y)
        fabric.print(f"step {step:3d}  loss {loss.item():.4f}")
        if not torch.isfinite(loss):
            if arg(0) == "guard":
                raise RuntimeError(f"non-finite loss {loss.item()} at step {step}; stopping")
            fabric.print("loss is not finite, ending training early")
            fabric.print(f"saved final weights at step {step}")
            return
        fabric.backward(loss)
        opt.step()
        opt.zero_grad()


# ---------------------------------------------------------------- success (some alarming)

def ok_scipy() -> None:
    import warnings

    import numpy as np
    import scipy.optimize
    warnings.simplefilter("always")
    rng = np.random.default_rng(1)
    t = np.linspace(0, 10, 200)
    y = 3.0 * np.exp(-0.4 * t) + 0.05 * rng.standard_normal(200)
    p, cov = scipy.optimize.curve_fit(lambda t, a, b, c: a * np.exp(-b * t) + 0 * c, t, y,
                                      p0=[1, 1, 1])
    say(f"decay fit a={p[0]:.3f} b={p[1]:.3f} (c unidentifiable: cov {cov[2, 2]})")
    say("calibration done, wrote calib.json")


def ok_retry() -> None:
    import traceback
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(2) as ex:
        futs = {i: ex.submit(_flaky, i, 0) for i in range(4)}
        for i, f in futs.items():
            try:
                say(f"shard {i}: {f.result()} rows")
            except ConnectionError:
                traceback.print_exc()
                say(f"shard {i}: retrying (attempt 2 of 3)")
                say(f"shard {i}: {ex.submit(_flaky, i, 1).result()} rows")
    say("4/4 shards converted, 0 failed")


def _flaky(i: int, attempt: int) -> int:
    if i == 2 and attempt == 0:
        raise ConnectionError("connection reset while fetching shard 2 (attempt 1)")
    return 1000 + i


# ---------------------------------------------------------------- Slurm multi-rank helpers

def _rank() -> int:
    return int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))


def slow_loop() -> None:
    say(f"rank {_rank()}: fitting tiles")
    for i in range(400):
        time.sleep(2)
        say(f"rank {_rank()}: tile {i} fitted")


def rank_job() -> None:
    """ARG0: the bad rank, ARG1: the mode it runs (ARG2.. its arguments); the others work on."""
    if _rank() != int(arg(0)):
        slow_loop()
        return
    time.sleep(3)
    mode = arg(1)
    del ARGS[:2]
    MODES[mode]()


MODES = {n: f for n, f in globals().items() if callable(f) and not n.startswith("_")
         and getattr(f, "__module__", "") == "__main__" and n not in ("say", "arg")}

if __name__ == "__main__":
    MODES[sys.argv[1]]()
