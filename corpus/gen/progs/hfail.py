"""Held-out failure programs: `hfail.py SCENARIO WORKDIR [ARG]`.

Each scenario does a little believable work (config dump, logging, progress) and then fails
for real: nothing here prints a failure message that the failure itself did not produce,
except where a real program would print its own diagnostic (noted at the scenario).
Written independently of corpus/generate/ (not read) so the classifier's rules were not
tuned on these shapes.
"""
from __future__ import annotations

import logging
import os
import random
import sys
import time

SCEN: dict[str, object] = {}
WORK = "/tmp"
ARG = ""


def scen(fn):
    SCEN[fn.__name__] = fn
    return fn


def chatter(kind: int = 0, steps: int = 3) -> None:
    """Varied surrounding output so cases do not share one shape."""
    rnd = random.Random(kind)
    if kind % 3 == 0:
        logging.basicConfig(level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        log = logging.getLogger("trainer")
        log.info("host=%s pid=%d", os.uname().nodename, os.getpid())
        log.info("config: batch_size=%d lr=%g seed=%d", rnd.choice([16, 32, 64]),
                 rnd.choice([1e-3, 3e-4]), kind)
        for s in range(steps):
            log.info("step %d/%d loss=%.4f", s + 1, steps * 10, 2.3 - 0.1 * s)
    elif kind % 3 == 1:
        print(f"[{time.strftime('%H:%M:%S')}] starting run {rnd.randrange(10**6):06d}")
        print("  data_root : /scratch/datasets/run")
        print("  workers   :", rnd.choice([2, 4, 8]))
        for s in range(steps):
            print(f"epoch 0 | it {s * 50:5d} | {rnd.uniform(80, 120):.1f} samples/s")
    else:
        sys.stderr.write(f"W{time.strftime('%m%d %H:%M:%S')} env.py:41] OMP_NUM_THREADS not set\n")
        for s in range(steps):
            pct = (s + 1) * 100 // steps
            sys.stderr.write(f"\rprocessing: {pct:3d}%|{'#' * (pct // 10):<10}| {s + 1}/{steps}")
        sys.stderr.write("\n")
    sys.stdout.flush()
    sys.stderr.flush()


# ---------------------------------------------------------------- python_exception
@scen
def exc_json():
    import json
    chatter(1)
    cfg = '{"model": "resnet50", "epochs": 90, "opt": {"lr": 0.1,}}'
    json.loads(cfg)


@scen
def exc_csv():
    import csv
    chatter(0)
    path = os.path.join(WORK, "meta.csv")
    with open(path, "w") as f:
        f.write("id,label,text\n1,cat,short\n2,dog," + "x" * 5000 + "\n")
    csv.field_size_limit(1024)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    print(len(rows))


@scen
def exc_yaml():
    import yaml
    chatter(2)
    text = "train:\n  epochs: 10\n  lr: 0.01\n   warmup: 500\n"
    yaml.safe_load(text)


@scen
def exc_numpy():
    import numpy as np
    chatter(3)
    feats = np.random.rand(128, 40)
    weights = np.random.rand(64)
    print("scores", (feats * weights).sum())


@scen
def exc_torch_shape():
    import torch
    chatter(4)
    net = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(8, 30)
    print(net(x).shape)


@scen
def exc_argparse():
    import argparse
    p = argparse.ArgumentParser(prog="train.py")
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--epochs", type=int, default=10)
    print("parsing arguments", flush=True)
    p.parse_args(["--lr", "3e-4x", "--epochs", "5"])


@scen
def exc_sqlite():
    import sqlite3
    chatter(5)
    db = sqlite3.connect(os.path.join(WORK, "runs.db"))
    db.execute("create table if not exists runs(id integer, name text)")
    db.execute("insert into metrics(run, step, value) values (1, 10, 0.5)")


@scen
def exc_asyncio():
    import asyncio

    async def fetch(i):
        await asyncio.sleep(0.01 * i)
        if i == 3:
            return {"shard": i}["size"]
        return i

    async def main():
        chatter(6)
        res = await asyncio.gather(*(fetch(i) for i in range(5)))
        print(res)

    asyncio.run(main())


@scen
def exc_assert():
    chatter(7)
    batch, labels = list(range(32)), list(range(31))
    assert len(batch) == len(labels), f"batch/label length mismatch: {len(batch)} vs {len(labels)}"


@scen
def exc_thread_pool():
    from concurrent.futures import ThreadPoolExecutor
    chatter(8)

    def tok(s):
        return s.encode("ascii")

    with ThreadPoolExecutor(4) as ex:
        out = list(ex.map(tok, ["hello", "world", "naïve", "text"]))
    print(out)


# ---------------------------------------------------------------- import_error
@scen
def imp_missing():
    chatter(9)
    import apex.amp  # noqa: F401


@scen
def imp_name():
    chatter(10)
    # removed in 3.10: code written for an older Python (a version mismatch)
    from collections import Mapping  # noqa: F401, UP035


@scen
def imp_ext():
    # the extension is built by the driver with a call to a symbol that no library defines
    sys.path.insert(0, ARG)
    chatter(11)
    import fastops  # noqa: F401


@scen
def imp_ctypes():
    import ctypes
    chatter(12)
    ctypes.CDLL("libfasttokenizer.so.3")


@scen
def imp_metadata():
    from importlib.metadata import version
    chatter(13)
    print("flash-attn", version("flash-attn"))


@scen
def imp_torch_missing_sub():
    chatter(14)
    import torch
    from torch.utils.data import DataLoader2  # noqa: F401
    print(torch.__version__)


# ---------------------------------------------------------------- file_not_found
@scen
def fnf_open():
    chatter(15)
    with open("/scratch/datasets/imagenet/train_index.txt") as f:
        print(f.readline())


@scen
def fnf_npload():
    import numpy as np
    chatter(16)
    np.load(os.path.join(WORK, "features", "val_embeddings.npy"))


@scen
def fnf_torchload():
    import torch
    chatter(17)
    torch.load(os.path.join(WORK, "ckpt", "epoch_0042.pt"), map_location="cpu")


@scen
def fnf_shutil():
    import shutil
    chatter(18)
    shutil.copytree(os.path.join(WORK, "pretrained", "bert-base"), os.path.join(WORK, "model"))


@scen
def fnf_subprocess():
    import subprocess
    chatter(19)
    subprocess.run(["sox", "in.wav", "-r", "16000", "out.wav"], check=True)


@scen
def fnf_chdir():
    chatter(20)
    os.chdir(os.path.join(WORK, "experiments", "run-17"))


# ---------------------------------------------------------------- permission_denied (gpatest)
@scen
def perm_read():
    chatter(21)
    with open(os.path.join(ARG, "secret_token.txt")) as f:
        print(f.read())


@scen
def perm_mkdir():
    chatter(22)
    os.makedirs(os.path.join(ARG, "outputs", "run-3"), exist_ok=True)


@scen
def perm_torchsave():
    import torch
    chatter(23)
    torch.save({"w": torch.zeros(3)}, os.path.join(ARG, "last.pt"))


@scen
def perm_kill():
    import signal
    chatter(24)
    os.kill(1, signal.SIGHUP)


@scen
def perm_exec():
    import subprocess
    chatter(25)
    subprocess.run([os.path.join(ARG, "prepare.sh")], check=True)


@scen
def perm_sqlite():
    import sqlite3
    chatter(26)
    db = sqlite3.connect(os.path.join(ARG, "cache.db"))
    db.execute("insert into kv values ('a', 'b')")
    db.commit()


# ---------------------------------------------------------------- disk_full (ARG is a small tmpfs)
@scen
def full_write():
    chatter(27)
    with open(os.path.join(ARG, "shard-000.bin"), "wb") as f:
        for i in range(64):
            f.write(os.urandom(64 * 1024))
            print(f"wrote chunk {i}", flush=True)


@scen
def full_npsave():
    import numpy as np
    chatter(28)
    np.save(os.path.join(ARG, "emb.npy"), np.random.rand(512, 512))


@scen
def full_torchsave():
    import torch
    chatter(29)
    torch.save(torch.nn.Linear(1024, 512).state_dict(), os.path.join(ARG, "model.pt"))


@scen
def full_sqlite():
    import sqlite3
    chatter(30)
    db = sqlite3.connect(os.path.join(ARG, "metrics.db"))
    db.execute("create table m(step integer, blob text)")
    for i in range(10000):
        db.execute("insert into m values (?, ?)", (i, "x" * 2000))
        if i % 50 == 0:
            db.commit()


@scen
def full_zip():
    import zipfile
    chatter(31)
    with zipfile.ZipFile(os.path.join(ARG, "artifacts.zip"), "w") as z:
        for i in range(20):
            z.writestr(f"pred_{i}.bin", os.urandom(100_000))


# ---------------------------------------------------------------- storage_io (ARG = port)
@scen
def io_urllib_stall():
    import urllib.request
    chatter(32)
    url = f"http://127.0.0.1:{ARG}/bucket/shards/train-00017.tar"
    print("GET", url, flush=True)
    urllib.request.urlopen(url, timeout=3).read()


@scen
def io_reset():
    import http.client
    chatter(33)
    c = http.client.HTTPConnection("127.0.0.1", int(ARG), timeout=5)
    c.request("GET", "/v1/objects/ckpt/step-4000.pt")
    c.getresponse().read()


@scen
def io_partial():
    import urllib.request
    chatter(34)
    with urllib.request.urlopen(f"http://127.0.0.1:{ARG}/data/part-0003.parquet", timeout=5) as r:
        data = r.read()
    print(len(data))


@scen
def io_retry():
    import socket
    chatter(35)
    log = logging.getLogger("fsclient")
    last = None
    for attempt in range(1, 4):
        try:
            s = socket.create_connection(("127.0.0.1", int(ARG)), timeout=1.5)
            s.sendall(b"READ /lustre/proj/shard-42 0 1048576\n")
            s.recv(4096)
        except OSError as e:  # a real client logs and retries
            last = e
            log.warning("read attempt %d failed: %r, retrying", attempt, e)
            time.sleep(0.5)
    raise last


@scen
def io_refused():
    import urllib.request
    chatter(36)
    urllib.request.urlopen(f"http://127.0.0.1:{ARG}/minio/health/ready", timeout=3)


@scen
def io_eio():
    # /proc/self/mem at an unmapped offset: the kernel's read returns a real EIO
    chatter(37)
    with open("/proc/self/mem", "rb") as f:
        f.seek(0)
        f.read(4096)


# ---------------------------------------------------------------- checkpoint_corrupt
def _make_ckpt(path):
    import torch
    torch.save({"model": torch.nn.Linear(256, 256).state_dict(), "step": 1200}, path)


@scen
def ckpt_trunc():
    import torch
    p = os.path.join(WORK, "step-1200.pt")
    _make_ckpt(p)
    size = os.path.getsize(p)
    os.truncate(p, size // 3)  # a copy interrupted mid-way
    chatter(38)
    torch.load(p, map_location="cpu")


@scen
def ckpt_garbage():
    import torch
    p = os.path.join(WORK, "best.pt")
    with open(p, "wb") as f:
        f.write(b"\x00\x13\x8f" + os.urandom(4000))
    chatter(39)
    torch.load(p, map_location="cpu", weights_only=False)


@scen
def ckpt_pickle():
    import pickle
    p = os.path.join(WORK, "optimizer_state.pkl")
    with open(p, "wb") as f:
        pickle.dump({"state": list(range(20000))}, f)
    os.truncate(p, 3000)
    chatter(40)
    with open(p, "rb") as f:
        pickle.load(f)


@scen
def ckpt_npz():
    import numpy as np
    p = os.path.join(WORK, "buffers.npz")
    np.savez(p, a=np.arange(10000), b=np.ones((50, 50)))
    with open(p, "r+b") as f:
        f.seek(os.path.getsize(p) - 200)
        f.write(b"\xff" * 200)
    chatter(41)
    d = np.load(p)
    print(d["a"].sum())


@scen
def ckpt_flip():
    import torch
    p = os.path.join(WORK, "ema.pt")
    _make_ckpt(p)
    with open(p, "r+b") as f:
        f.seek(0)
        f.write(b"\x00" * 64)  # local file header overwritten
    chatter(42)
    torch.load(p, map_location="cpu")


@scen
def ckpt_empty():
    import torch
    p = os.path.join(WORK, "latest.pt")
    open(p, "wb").close()
    chatter(43)
    sd = torch.load(p, map_location="cpu")
    print(sd.keys())


# ---------------------------------------------------------------- segfault
@scen
def segv_ctypes_fh():
    import ctypes
    import faulthandler
    faulthandler.enable()
    chatter(44)
    print(ctypes.c_long.from_address(16).value)


@scen
def segv_ctypes_quiet():
    import ctypes
    chatter(45)
    ctypes.memmove(0, b"abcd", 4)


@scen
def segv_abort():
    chatter(46)
    os.abort()


# ---------------------------------------------------------------- host_oom (driver sets RLIMIT_AS)
@scen
def oom_bytes():
    chatter(47)
    bufs = []
    for _ in range(1000):
        bufs.append(bytearray(64 * 1024 * 1024))
        print(f"cache {len(bufs) * 64} MiB", flush=True)


@scen
def oom_numpy():
    import numpy as np
    chatter(48)
    m = np.zeros((200_000, 50_000), dtype=np.float32)
    print(m.shape)


@scen
def oom_torch():
    import torch
    chatter(49)
    t = torch.empty(40_000, 40_000)
    print(t.numel())


@scen
def oom_list():
    chatter(50)
    rows = []
    while True:
        rows.append([0.0] * 1_000_000)


# ---------------------------------------------------------------- nan_divergence
def _regression(lr, steps=200, momentum=0.0):
    import torch
    torch.manual_seed(0)
    x = torch.randn(256, 16) * 50 + 100  # unnormalised features
    y = x @ torch.randn(16, 1) * 3
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    return x, y, model, opt


@scen
def nan_isfinite():
    import torch
    x, y, model, opt = _regression(0.5)
    for step in range(200):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        if step % 5 == 0:
            print(f"step {step:4d} loss {loss.item():.4e}", flush=True)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"loss is {loss.item()} at step {step}")
        loss.backward()
        opt.step()


@scen
def nan_anomaly():
    import torch
    torch.autograd.set_detect_anomaly(True)
    torch.manual_seed(1)
    x = torch.randn(128, 8) * 20
    w = torch.nn.Parameter(torch.ones(8, 1))
    opt = torch.optim.SGD([w], lr=5.0)
    for step in range(100):
        opt.zero_grad()
        pred = (x @ w).exp()  # overflows to inf as w grows, inf - inf gives nan in backward
        loss = (pred - x.sum(1, keepdim=True)).pow(2).mean()
        print(f"it={step} loss={loss.item():.3g}", flush=True)
        loss.backward()
        opt.step()


@scen
def nan_clip():
    import torch
    x, y, _, _ = _regression(0.0)
    model = torch.nn.Linear(16, 1)  # plain linear regression: nothing bounds the blow-up
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    logging.basicConfig(level=logging.INFO)
    for step in range(200):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1e30, error_if_nonfinite=True)
        opt.step()
        logging.info("global_step=%d train/loss=%.3f", step, loss.item())


@scen
def nan_numpy():
    import numpy as np
    np.seterr(all="raise")
    rng = np.random.default_rng(3)
    x = rng.normal(size=(500, 10)) * 1e3
    y = x.sum(1)
    w = np.zeros(10)
    for it in range(1000):
        grad = 2 * x.T @ (x @ w - y) / len(y)
        w -= 0.01 * grad
        if it % 2 == 0:
            print(f"iter {it} |w|={np.linalg.norm(w):.3e}", flush=True)


@scen
def nan_assert():
    import math

    import torch
    x, y, model, opt = _regression(0.8)
    for step in range(200):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        print(f"train | step {step} | loss {loss.item()}", flush=True)
        assert not math.isnan(loss.item()), "loss diverged"
        loss.backward()
        opt.step()


@scen
def nan_exit():
    import torch
    x, y, model, opt = _regression(1.0, momentum=0.95)
    for step in range(300):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        print(f"{step},{loss.item()}", flush=True)
        if torch.isnan(loss) or torch.isinf(loss):
            sys.exit(f"Non-finite loss encountered ({loss.item()}); aborting training.")
        loss.backward()
        opt.step()


# ---------------------------------------------------------------- dataloader_worker
class _DS:
    def __init__(self, how):
        self.how = how

    def __len__(self):
        return 400

    def __getitem__(self, i):
        import torch
        if i == 37:
            if self.how == "sigkill":
                import signal
                os.kill(os.getpid(), signal.SIGKILL)
            elif self.how == "exit":
                os._exit(3)
            elif self.how == "segv":
                import ctypes
                print(ctypes.c_int.from_address(8).value)
            elif self.how == "abort":
                os.abort()
            elif self.how == "term":
                import signal
                os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.005)
        return torch.full((4,), float(i))


def _loader(how, workers, persistent=False):
    import torch
    from torch.utils.data import DataLoader
    dl = DataLoader(_DS(how), batch_size=8, num_workers=workers, persistent_workers=persistent)
    chatter(51 + workers)
    for epoch in range(2):
        for i, b in enumerate(dl):
            if i % 10 == 0:
                print(f"epoch {epoch} batch {i} mean {b.mean():.2f}", flush=True)
    print(torch.__version__)


@scen
def dl_sigkill():
    _loader("sigkill", 2)


@scen
def dl_exit():
    _loader("exit", 3)


@scen
def dl_segv():
    _loader("segv", 2, persistent=True)


@scen
def dl_abort():
    _loader("abort", 4)


@scen
def dl_term():
    _loader("term", 1)


# ---------------------------------------------------------------- device_mismatch (cpu vs meta)
@scen
def dev_linear():
    import torch
    chatter(56)
    with torch.device("meta"):
        m = torch.nn.Linear(64, 10)
    print(m(torch.randn(4, 64)))


@scen
def dev_cat():
    import torch
    chatter(57)
    a = torch.randn(2, 3)
    b = torch.empty(2, 3, device="meta")
    print(torch.cat([a, b]))


@scen
def dev_lstm():
    import torch
    chatter(58)
    with torch.device("meta"):
        rnn = torch.nn.LSTM(32, 64, batch_first=True)
    out, _ = rnn(torch.randn(8, 16, 32))
    print(out.shape)


@scen
def dev_loss():
    import torch
    chatter(59)
    logits = torch.randn(16, 5, device="meta")
    target = torch.randint(0, 5, (16,))
    print(torch.nn.functional.cross_entropy(logits, target))


@scen
def dev_mask():
    import torch
    chatter(60)
    scores = torch.randn(2, 8, 8)
    causal = torch.ones(8, 8, dtype=torch.bool).triu(1).to("meta")  # mask built on the wrong device
    print(scores.masked_fill(causal, float("-inf")).softmax(-1).shape)


# ---------------------------------------------------------------- hang (driver's watchdog stops it)
@scen
def hang_lock():
    import threading
    chatter(61, steps=5)
    lk = threading.Lock()
    lk.acquire()
    lk.acquire()


@scen
def hang_sleep():
    chatter(62, steps=4)
    time.sleep(3600)


@scen
def hang_pipe():
    r, w = os.pipe()
    chatter(63, steps=6)
    os.read(r, 1)


@scen
def hang_queue():
    import queue
    import threading
    q: queue.Queue = queue.Queue()

    def producer():
        for i in range(5):
            q.put(i)
        # forgets the sentinel: the consumer waits forever

    threading.Thread(target=producer).start()
    chatter(64)
    while True:
        item = q.get()
        print("consumed", item, flush=True)


@scen
def hang_child():
    import subprocess
    chatter(65)
    subprocess.run(["sleep", "3600"])


# ---------------------------------------------------------------- success (exit 0, noisy)
@scen
def ok_warnings():
    import warnings
    chatter(66)
    warnings.warn("error_bad_lines is deprecated and will be removed", DeprecationWarning,
                  stacklevel=1)
    warnings.simplefilter("always")
    warnings.warn("Error estimates may be inaccurate for small batches", UserWarning,
                  stacklevel=1)
    print("validation: 0 errors, 0 failures; accuracy 0.913")


@scen
def ok_progress():
    for i in range(0, 101, 5):
        bar = "█" * (i // 5)
        sys.stderr.write(f"\r{i:3d}%|{bar:<20}| {i * 12}/1200 [00:{i // 4:02d}<00:25, 47.9it/s]")
        sys.stderr.flush()
        time.sleep(0.01)
    sys.stderr.write("\n")
    print("Saved model to /tmp/model_final.pt")


@scen
def ok_handled():
    chatter(0)
    log = logging.getLogger("loader")
    try:
        with open("/nonexistent/override.yaml") as f:
            f.read()
    except FileNotFoundError:
        log.exception("no override config, falling back to defaults")
    print("training finished: best_val_loss=0.2231")


@scen
def ok_retry():
    import urllib.error
    import urllib.request
    chatter(67)
    for attempt in range(3):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{ARG}/metrics", timeout=1)
        except (urllib.error.URLError, OSError) as e:
            print(f"WARNING: could not push metrics (attempt {attempt + 1}): {e}; continuing")
    print("run complete, exit status ok")


@scen
def ok_numpy_warn():
    import numpy as np
    chatter(68)
    a = np.array([1.0, 0.0, 2.0])
    print("ratio", np.log(a).mean())
    print("nan_to_num applied; final score", np.nan_to_num(a / a).sum())


@scen
def ok_torch():
    import torch
    torch.manual_seed(0)
    x = torch.randn(64, 4)
    y = x.sum(1, keepdim=True)
    m = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    for s in range(50):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        if s % 10 == 0:
            print(f"step {s} loss {loss.item():.5f} grad_error_norm 0.0", flush=True)
    print("Training done. error rate 0.00%")


# ---------------------------------------------------------------- unknown
@scen
def unk_done():
    chatter(69)
    print("done?")
    sys.exit(1)


@scen
def unk_threshold():
    chatter(70)
    print("eval: mAP=0.412 (target 0.450)")
    sys.exit(3)


@scen
def unk_silent():
    sys.exit(255)


def main() -> None:
    global WORK, ARG
    if len(sys.argv) < 3 or sys.argv[1] not in SCEN:
        sys.exit(f"usage: hfail.py SCENARIO WORKDIR [ARG]; scenarios: {' '.join(sorted(SCEN))}")
    WORK = sys.argv[2]
    ARG = sys.argv[3] if len(sys.argv) > 3 else ""
    os.makedirs(WORK, exist_ok=True)
    SCEN[sys.argv[1]]()


if __name__ == "__main__":
    main()
