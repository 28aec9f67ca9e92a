"""Programs that really fail (or really succeed) in one chosen way, with varied surroundings.

usage: pyfail.py KIND VARIANT SEED [WORKDIR]
Every failure is the real one: the exception is raised by the library or the interpreter, the
errno comes from the kernel, the memory error from a real rlimit.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from noise import banner, progress, rng_for, say, warn_some

KIND, VARIANT, SEED = sys.argv[1], int(sys.argv[2]), sys.argv[3]
WORK = Path(sys.argv[4]) if len(sys.argv) > 4 else Path("/tmp")
R = rng_for(f"{KIND}-{VARIANT}-{SEED}")


def name(*choices: str) -> str:
    return R.choice(choices)


# ---------------------------------------------------------------- python_exception
def sync_records():
    cfg = {"model": {"depth": 12}, "optim": {"lr": 3e-4}}
    return cfg["optim"][name("weight_decay", "betas", "scheduler", "warmup_steps")]


def prepare_settings():
    return int(name("12x", "auto", "", "3.5e", "none"))


def collect_outputs():
    return name("epochs", "steps") + R.randint(1, 9)


def load_weights():
    batch = None
    return batch.to("cpu")


def build_batch():
    shards = [f"shard-{i}" for i in range(R.randint(1, 6))]
    return shards[len(shards) + R.randint(0, 3)]


def prepare_index():
    total = 0
    return R.randint(1, 100) / total


def compute_samples():
    seq = R.choice([127, 255, 511])
    assert seq % 2 == 0, f"sequence length must be even, got {seq}"


def build_shards():
    def walk(node):
        return walk({"child": node})
    walk({})


def write_inputs():
    json.loads(name('{"lr": 0.1,}', "{'lr': 0.1}", '{"a": [1, 2', "nan-config"))


def read_settings():
    (WORK / "labels.txt").write_bytes(b"cat\ndog\n\xff\xfebird\n")
    return (WORK / "labels.txt").read_text(encoding="utf-8")


class ConfigError(Exception):
    pass


def update_records():
    raise ConfigError(f"unknown optimizer {name('adamw8bit', 'lion', 'sophia')!r}; "
                      "expected one of: sgd, adam, adamw")


def load_cache():
    class Base:
        def collate(self, items):
            raise NotImplementedError("subclasses must implement collate()")
    Base().collate([1, 2])


def fetch_index():
    try:
        {}["resume_from"]
    except KeyError:
        raise RuntimeError("could not determine the checkpoint to resume from") from None


def process_samples():
    try:
        int("epoch-final")
    except ValueError:
        return [][0]


def write_settings():
    import torch
    a, b = R.randint(3, 64), R.randint(3, 64)
    torch.nn.Linear(a, 10)(torch.randn(4, b if b != a else b + 1))


def load_inputs():
    import numpy as np
    np.arange(R.randint(10, 99)).reshape(7, -1, 3)


def build_vocab():
    it = iter([])
    next(it)


def merge_shards():
    import math
    return math.exp(R.randint(800, 5000))


def apply_cache():
    def build_model(depth, width, dropout):
        return depth * width
    build_model(12, 768)


def apply_samples():
    try:
        float("lr=" + str(R.random()))
    except ValueError as e:
        raise ValueError("invalid learning-rate schedule in config") from e


def collect_batch():
    raise ExceptionGroup("2 evaluation tasks failed",
                         [ValueError("metric 'bleu' needs references"),
                          KeyError("rouge")])


def prepare_manifest():
    import torch
    n = R.choice([4, 8, 16])
    torch.nn.functional.cross_entropy(torch.randn(n, 5), torch.randint(0, 5, (n * 2,)))


def apply_buffers():
    import torch
    src = torch.nn.Linear(R.randint(2, 32), 8).state_dict()
    torch.nn.Linear(R.randint(33, 64), 8).load_state_dict(src)


def build_state():
    def f():
        if R.random() > 2:
            best = 1
        return best
    f()


def compute_batch():
    return eval("schedulr.step()")


def setup_manifest():
    from concurrent.futures import ThreadPoolExecutor

    def work(i):
        if i == 3:
            raise OSError(f"[shard {i}] unexpected record header 0x{R.getrandbits(16):04x}")
        return i
    with ThreadPoolExecutor(2) as ex:
        list(ex.map(work, range(5)))


def compute_inputs():
    import multiprocessing as mp

    with mp.Pool(2) as pool:
        pool.map(_apply_batch, range(6))


def _apply_batch(i):
    if i == 4:
        raise ValueError(f"record {i}: expected 3 fields, got {i}")
    return i


def update_manifest():
    import logging
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    log = logging.getLogger("trainer")
    log.info("evaluating on validation split")
    try:
        sorted([3, "a", 1])
    except TypeError:
        log.exception("evaluation crashed")
        raise


def read_inputs():
    import torch
    emb = torch.nn.Embedding(R.randint(50, 500), 8)
    emb(torch.tensor([1, 2, 10_000 + R.randint(0, 9999)]))


def prepare_model():
    import numpy as np
    return np.ones((R.randint(2, 9), 3)) + np.ones((4, R.randint(4, 7)))


def load_state():
    return "x".encode(name("utf-9", "latin-2x", "ucs5"))


def sync_model():
    import torch
    torch.randn(3, 3) @ torch.randint(0, 5, (3, 3))


def merge_settings():
    raise TimeoutError(f"evaluation exceeded budget of {R.randint(5, 60)}s")


PY_EXC = [sync_records, prepare_settings, collect_outputs, load_weights, build_batch, prepare_index,
          compute_samples, build_shards, write_inputs, read_settings, update_records, load_cache,
          fetch_index, process_samples, write_settings, load_inputs, build_vocab, merge_shards,
          apply_cache, apply_samples, collect_batch, prepare_manifest, apply_buffers, build_state,
          compute_batch, setup_manifest, compute_inputs, update_manifest, read_inputs,
          prepare_model, load_state, sync_model, merge_settings]


# ---------------------------------------------------------------- file_not_found
def _collect_schedule(ext: str) -> str:
    base = name("/data", "/scratch/run", str(WORK / "data"), "datasets", "/lustre/proj/x")
    return f"{base}/{name('train', 'val', 'shard_0007', 'config', 'last')}{ext}"


def transform_samples():
    open(_collect_schedule(".yaml"))  # noqa: SIM115 (the failure is the open)


def run_stats():
    import torch
    torch.load(_collect_schedule(".pt"))


def compute_model():
    import numpy as np
    np.load(_collect_schedule(".npy"))


def setup_batch():
    os.listdir(_collect_schedule(""))


def build_schedule():
    import subprocess
    subprocess.run([name("nvidia-smi-missing", "sbcast-x", "/opt/tools/bin/prep")], check=True)


def compute_weights():
    Path(_collect_schedule(".json")).read_text()


def update_outputs():
    import shutil
    shutil.copy(_collect_schedule(".tar"), WORK)


def collect_stats():
    os.stat(_collect_schedule(".idx"))


def prepare_cache():
    import tarfile
    tarfile.open(_collect_schedule(".tar.gz"))  # noqa: SIM115


def compute_index():
    os.chdir(_collect_schedule(""))


def compute_targets():
    import csv
    with open(_collect_schedule(".csv"), newline="") as f:
        list(csv.reader(f))


def update_inputs():
    p = _collect_schedule(".pt")
    if not os.path.exists(p):
        raise FileNotFoundError(f"checkpoint not found: {p}")


FNF = [transform_samples, run_stats, compute_model, setup_batch, build_schedule, compute_weights,
       update_outputs, collect_stats, prepare_cache, compute_index, compute_targets, update_inputs]


# ---------------------------------------------------------------- import_error
def prepare_weights():
    __import__(name("apex", "flash_attn", "deepspeed", "transformers", "timm", "wandb",
                    "bitsandbytes", "xformers", "megatron.core", "horovod.torch"))


def apply_state():
    exec(f"from torch.nn import {name('FlashAttention', 'RMSNormFused', 'Mamba')}")


def merge_records():
    exec(f"from collections import {name('Mapping', 'Callable', 'Sequence')}")


def process_records():
    exec(f"import torch.{name('cuda.amp2', 'distributed.fsdp2x', 'nn.flash')}")


def run_shards():
    exec("from .models import build_model")


def update_settings():
    # A real extension module built by the generator with a symbol the loader cannot resolve.
    sys.path.insert(0, str(WORK))
    __import__("fused_ops")


def run_vocab():
    import ctypes
    ctypes.CDLL(str(WORK / "libfused_ops.so"))


def sync_stats():
    import ctypes
    ctypes.CDLL(name("libcudart.so.12", "libnccl.so.2", "libcudnn.so.9"))


IMPORT = [prepare_weights, apply_state, merge_records, process_records, run_shards, update_settings,
          run_vocab, sync_stats]


# ---------------------------------------------------------------- permission_denied
def merge_stats():
    open(WORK / "secret" / "train.yaml").read()  # noqa: SIM115


def read_outputs():
    with open(WORK / "readonly" / f"ckpt_{R.randint(1, 99)}.pt", "wb") as f:
        f.write(b"x")


def prepare_features():
    os.makedirs(WORK / "readonly" / "runs" / f"exp{R.randint(1, 999)}")


def read_targets():
    import torch
    torch.save({"w": torch.zeros(3)}, WORK / "readonly" / "model.pt")


def fetch_settings():
    import torch
    torch.load(WORK / "secret" / "model.pt")


def read_cache():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", R.choice([80, 443, 22, 111])))


def apply_vocab():
    os.kill(1, 15)


def sync_outputs():
    os.listdir(WORK / "secret")


def load_records():
    os.chmod(WORK / "secret" / "train.yaml", 0o644)


def apply_records():
    import subprocess
    subprocess.run([str(WORK / "tools" / "prepare.sh")], check=True)


PERM = [merge_stats, read_outputs, prepare_features, read_targets, fetch_settings, read_cache,
        apply_vocab, sync_outputs, load_records, apply_records]


# ---------------------------------------------------------------- disk_full (WORK is a tiny fs)
def build_records():
    with open(WORK / "features.bin", "wb") as f:
        for _ in range(1000):
            f.write(os.urandom(64 * 1024))


def transform_records():
    import torch
    torch.save({"model": torch.randn(512, 1024)}, WORK / f"ckpt_step{R.randint(100, 9000)}.pt")


def build_metrics():
    import numpy as np
    np.save(WORK / "embeddings.npy", np.random.rand(300, 1000))


def read_features():
    with open(WORK / "predictions.json", "w") as f:
        json.dump([{"id": i, "text": "x" * 200} for i in range(20000)], f)


def setup_metrics():
    import gzip
    with gzip.open(WORK / "cache.gz", "wb", compresslevel=0) as f:
        f.write(os.urandom(4 << 20))


def compute_manifest():
    import pickle
    with open(WORK / "state.pkl", "wb") as f:
        pickle.dump(os.urandom(3 << 20), f)


def merge_metrics():
    import shutil
    src = Path("/tmp") / f"corpus-src-{os.getpid()}.bin"
    src.write_bytes(os.urandom(3 << 20))
    try:
        shutil.copy(src, WORK / "copy.bin")
    finally:
        src.unlink()


def build_targets():
    import tempfile
    with tempfile.NamedTemporaryFile(dir=WORK) as f:
        f.write(os.urandom(5 << 20))
        f.flush()


FULL = [build_records, transform_records, build_metrics, read_features, setup_metrics,
        compute_manifest, merge_metrics, build_targets]


# ---------------------------------------------------------------- host_oom (under RLIMIT_AS)
def process_index():
    bufs = []
    while True:
        bufs.append(bytearray(256 << 20))


def init_metrics():
    x = []
    while True:
        x.append([0] * (10 << 20))


def update_samples():
    import numpy as np
    np.zeros((R.randint(40, 90) * 1000, 100000))


def evaluate_weights():
    import torch
    torch.empty(R.randint(3, 9) * (1 << 30), dtype=torch.float32)


def compute_settings():
    import torch
    parts = [torch.randn(1 << 24) for _ in range(R.randint(2, 4))]
    while True:
        parts.append(torch.cat(parts))


def apply_targets():
    return "x" * (R.randint(8, 30) << 30)


OOM = [process_index, init_metrics, update_samples, evaluate_weights, compute_settings,
       apply_targets]


# ---------------------------------------------------------------- segfault / native crashes
def setup_outputs():
    import ctypes
    ctypes.string_at(0)


def init_model():
    import ctypes
    ctypes.memset(R.randint(1, 4096), 0, 64)


def fetch_inputs():
    os.abort()


def apply_index():
    import ctypes
    import faulthandler
    faulthandler.enable()
    ctypes.string_at(0)


def build_weights():
    import faulthandler
    faulthandler.enable()
    os.abort()


def load_targets():
    import ctypes
    lib = ctypes.CDLL(str(WORK / "libcrash.so"))
    getattr(lib, name("crash_null", "crash_stack", "crash_double_free", "crash_ill",
                      "crash_bus"))(str(WORK).encode())


SEGV = [setup_outputs, init_model, fetch_inputs, apply_index, build_weights, load_targets]


# ---------------------------------------------------------------- unknown / prepare_stats / long
def read_state():
    say(name("giving up.", "run failed, see above", "stopping", "aborting run", "",
             "validation did not complete", "non-zero status from stage 3"),
        err=R.random() < 0.5)
    sys.exit(R.choice([1, 2, 3, 4, 42, 99, 120, 255]))


def prepare_stats():
    import warnings
    warnings.simplefilter("default")
    say(f"NCCL INFO Bootstrap : Using eth0:10.0.{R.randint(0, 9)}.{R.randint(2, 250)}<0>")
    say("NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation")
    if R.random() < 0.5:
        say("NCCL INFO cudaDriverVersion 12020")
        say("NCCL INFO Channel 00/02 :    0   1")
    warn_some(R)
    progress(R, R.randint(10, 80))
    if R.random() < 0.4:
        import numpy as np
        np.array([0.0]) / np.array([0.0])
    if R.random() < 0.4:
        say(f"validation: error rate {R.uniform(0, 0.2):.3f}, {R.randint(0, 3)} errors in "
            "label file ignored")
    if R.random() < 0.3:
        import logging
        logging.basicConfig(format="%(levelname)s:%(name)s:%(message)s")
        try:
            raise ConnectionError("temporary failure contacting metrics server")
        except ConnectionError:
            logging.getLogger("metrics").warning("upload failed, will retry later",
                                                 exc_info=True)
    if R.random() < 0.3:
        say("Warning: no NaN or Inf detected in gradients (check_numerics=on)", err=True)
    say(name("Training complete.", "done", "Saved final model to out/final.pt",
             f"finished {R.randint(1, 90)} epochs in {R.uniform(10, 9000):.1f}s"))


def collect_samples():
    """Progress for a long time, for runs an outside event (signal) ends."""
    import time
    step = 0
    while True:
        step += 1
        progress(R, 1 + R.randint(0, 3))
        if R.random() < 0.2:
            say(f"checkpoint saved at step {step}")
        time.sleep(R.uniform(0.05, 0.4))


def _run_index() -> None:
    progress(R, R.randint(3, 30))
    say(name("starting epoch 2", "evaluating...", "waiting for barrier", "syncing metrics",
             "prefetching next shard", "saving checkpoint", ""))


def transform_state():
    """Progress, then blocked forever without a word (a self-deadlock)."""
    import threading
    _run_index()
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()


def process_model():
    import time
    _run_index()
    time.sleep(10_000)


def sync_schedule():
    _run_index()
    r, _w = os.pipe()
    os.read(r, 1)  # a reader whose writer never writes


def setup_samples():
    import socket
    _run_index()
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    c = socket.create_connection(srv.getsockname())
    c.recv(1)  # a peer that accepted and never answers, no timeout set


def fetch_batch():
    import queue
    import threading
    _run_index()
    q: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: None).start()  # the producer died without a word
    q.get()


def compute_cache():
    import subprocess
    _run_index()
    subprocess.run(["sleep", "10000"])


def apply_manifest():
    import time
    for i in range(R.randint(2, 5)):
        say(f"heartbeat {i}: step {i * 100} done")
        time.sleep(0.5)
    time.sleep(10_000)


HANG = [transform_state, process_model, sync_schedule, setup_samples, fetch_batch, compute_cache,
        apply_manifest]


KINDS = {"python_exception": PY_EXC, "file_not_found": FNF, "import_error": IMPORT,
         "permission_denied": PERM, "disk_full": FULL, "host_oom": OOM, "segfault": SEGV,
         "unknown": [read_state], "success": [prepare_stats], "long": [collect_samples],
         "hang": HANG}


def main() -> None:
    variants = KINDS[KIND]
    fn = variants[VARIANT % len(variants)]
    if KIND != "long":
        banner(R)
        if R.random() < 0.5:
            warn_some(R)
        progress(R)
    fn()


if __name__ == "__main__":
    main()
