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
def exc_keyerror():
    cfg = {"model": {"depth": 12}, "optim": {"lr": 3e-4}}
    return cfg["optim"][name("weight_decay", "betas", "scheduler", "warmup_steps")]


def exc_valueerror():
    return int(name("12x", "auto", "", "3.5e", "none"))


def exc_typeerror():
    return name("epochs", "steps") + R.randint(1, 9)


def exc_attr():
    batch = None
    return batch.to("cpu")


def exc_index():
    shards = [f"shard-{i}" for i in range(R.randint(1, 6))]
    return shards[len(shards) + R.randint(0, 3)]


def exc_zero():
    total = 0
    return R.randint(1, 100) / total


def exc_assert():
    seq = R.choice([127, 255, 511])
    assert seq % 2 == 0, f"sequence length must be even, got {seq}"


def exc_recursion():
    def walk(node):
        return walk({"child": node})
    walk({})


def exc_json():
    json.loads(name('{"lr": 0.1,}', "{'lr': 0.1}", '{"a": [1, 2', "nan-config"))


def exc_unicode():
    (WORK / "labels.txt").write_bytes(b"cat\ndog\n\xff\xfebird\n")
    return (WORK / "labels.txt").read_text(encoding="utf-8")


class ConfigError(Exception):
    pass


def exc_custom():
    raise ConfigError(f"unknown optimizer {name('adamw8bit', 'lion', 'sophia')!r}; "
                      "expected one of: sgd, adam, adamw")


def exc_notimpl():
    class Base:
        def collate(self, items):
            raise NotImplementedError("subclasses must implement collate()")
    Base().collate([1, 2])


def exc_chained():
    try:
        {}["resume_from"]
    except KeyError:
        raise RuntimeError("could not determine the checkpoint to resume from") from None


def exc_chained_ctx():
    try:
        int("epoch-final")
    except ValueError:
        return [][0]


def exc_torch_shape():
    import torch
    a, b = R.randint(3, 64), R.randint(3, 64)
    torch.nn.Linear(a, 10)(torch.randn(4, b if b != a else b + 1))


def exc_numpy_reshape():
    import numpy as np
    np.arange(R.randint(10, 99)).reshape(7, -1, 3)


def exc_stopiter():
    it = iter([])
    next(it)


def exc_overflow():
    import math
    return math.exp(R.randint(800, 5000))


def exc_missing_arg():
    def build_model(depth, width, dropout):
        return depth * width
    build_model(12, 768)


def exc_raise_from():
    try:
        float("lr=" + str(R.random()))
    except ValueError as e:
        raise ValueError("invalid learning-rate schedule in config") from e


def exc_group():
    raise ExceptionGroup("2 evaluation tasks failed",
                         [ValueError("metric 'bleu' needs references"),
                          KeyError("rouge")])


def exc_torch_batch():
    import torch
    n = R.choice([4, 8, 16])
    torch.nn.functional.cross_entropy(torch.randn(n, 5), torch.randint(0, 5, (n * 2,)))


def exc_state_dict():
    import torch
    src = torch.nn.Linear(R.randint(2, 32), 8).state_dict()
    torch.nn.Linear(R.randint(33, 64), 8).load_state_dict(src)


def exc_unbound():
    def f():
        if R.random() > 2:
            best = 1
        return best
    f()


def exc_name():
    return eval("schedulr.step()")


def exc_futures():
    from concurrent.futures import ThreadPoolExecutor

    def work(i):
        if i == 3:
            raise OSError(f"[shard {i}] unexpected record header 0x{R.getrandbits(16):04x}")
        return i
    with ThreadPoolExecutor(2) as ex:
        list(ex.map(work, range(5)))


def exc_pool():
    import multiprocessing as mp

    with mp.Pool(2) as pool:
        pool.map(_pool_work, range(6))


def _pool_work(i):
    if i == 4:
        raise ValueError(f"record {i}: expected 3 fields, got {i}")
    return i


def exc_logging():
    import logging
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    log = logging.getLogger("trainer")
    log.info("evaluating on validation split")
    try:
        sorted([3, "a", 1])
    except TypeError:
        log.exception("evaluation crashed")
        raise


def exc_embedding_index():
    import torch
    emb = torch.nn.Embedding(R.randint(50, 500), 8)
    emb(torch.tensor([1, 2, 10_000 + R.randint(0, 9999)]))


def exc_numpy_broadcast():
    import numpy as np
    return np.ones((R.randint(2, 9), 3)) + np.ones((4, R.randint(4, 7)))


def exc_lookup():
    return "x".encode(name("utf-9", "latin-2x", "ucs5"))


def exc_dtype():
    import torch
    torch.randn(3, 3) @ torch.randint(0, 5, (3, 3))


def exc_keyboard_like():
    raise TimeoutError(f"evaluation exceeded budget of {R.randint(5, 60)}s")


PY_EXC = [exc_keyerror, exc_valueerror, exc_typeerror, exc_attr, exc_index, exc_zero,
          exc_assert, exc_recursion, exc_json, exc_unicode, exc_custom, exc_notimpl,
          exc_chained, exc_chained_ctx, exc_torch_shape, exc_numpy_reshape, exc_stopiter,
          exc_overflow, exc_missing_arg, exc_raise_from, exc_group, exc_torch_batch,
          exc_state_dict, exc_unbound, exc_name, exc_futures, exc_pool, exc_logging,
          exc_embedding_index, exc_numpy_broadcast, exc_lookup, exc_dtype, exc_keyboard_like]


# ---------------------------------------------------------------- file_not_found
def _missing(ext: str) -> str:
    base = name("/data", "/scratch/run", str(WORK / "data"), "datasets", "/lustre/proj/x")
    return f"{base}/{name('train', 'val', 'shard_0007', 'config', 'last')}{ext}"


def fnf_open():
    open(_missing(".yaml"))  # noqa: SIM115 (the failure is the open)


def fnf_torch():
    import torch
    torch.load(_missing(".pt"))


def fnf_numpy():
    import numpy as np
    np.load(_missing(".npy"))


def fnf_listdir():
    os.listdir(_missing(""))


def fnf_exec():
    import subprocess
    subprocess.run([name("nvidia-smi-missing", "sbcast-x", "/opt/tools/bin/prep")], check=True)


def fnf_pathlib():
    Path(_missing(".json")).read_text()


def fnf_shutil():
    import shutil
    shutil.copy(_missing(".tar"), WORK)


def fnf_stat():
    os.stat(_missing(".idx"))


def fnf_tar():
    import tarfile
    tarfile.open(_missing(".tar.gz"))  # noqa: SIM115


def fnf_chdir():
    os.chdir(_missing(""))


def fnf_csv():
    import csv
    with open(_missing(".csv"), newline="") as f:
        list(csv.reader(f))


def fnf_custom():
    p = _missing(".pt")
    if not os.path.exists(p):
        raise FileNotFoundError(f"checkpoint not found: {p}")


FNF = [fnf_open, fnf_torch, fnf_numpy, fnf_listdir, fnf_exec, fnf_pathlib, fnf_shutil, fnf_stat,
       fnf_tar, fnf_chdir, fnf_csv, fnf_custom]


# ---------------------------------------------------------------- import_error
def imp_module():
    __import__(name("apex", "flash_attn", "deepspeed", "transformers", "timm", "wandb",
                    "bitsandbytes", "xformers", "megatron.core", "horovod.torch"))


def imp_name():
    exec(f"from torch.nn import {name('FlashAttention', 'RMSNormFused', 'Mamba')}")


def imp_name_std():
    exec(f"from collections import {name('Mapping', 'Callable', 'Sequence')}")


def imp_submodule():
    exec(f"import torch.{name('cuda.amp2', 'distributed.fsdp2x', 'nn.flash')}")


def imp_relative():
    exec("from .models import build_model")


def imp_ext_undefined():
    # A real extension module built by the generator with a symbol the loader cannot resolve.
    sys.path.insert(0, str(WORK))
    __import__("fused_ops")


def imp_ctypes_undefined():
    import ctypes
    ctypes.CDLL(str(WORK / "libfused_ops.so"))


def imp_ctypes_missing():
    import ctypes
    ctypes.CDLL(name("libcudart.so.12", "libnccl.so.2", "libcudnn.so.9"))


IMPORT = [imp_module, imp_name, imp_name_std, imp_submodule, imp_relative, imp_ext_undefined,
          imp_ctypes_undefined, imp_ctypes_missing]


# ---------------------------------------------------------------- permission_denied
def perm_read():
    open(WORK / "secret" / "train.yaml").read()  # noqa: SIM115


def perm_write_dir():
    with open(WORK / "readonly" / f"ckpt_{R.randint(1, 99)}.pt", "wb") as f:
        f.write(b"x")


def perm_makedirs():
    os.makedirs(WORK / "readonly" / "runs" / f"exp{R.randint(1, 999)}")


def perm_torch_save():
    import torch
    torch.save({"w": torch.zeros(3)}, WORK / "readonly" / "model.pt")


def perm_torch_load():
    import torch
    torch.load(WORK / "secret" / "model.pt")


def perm_bind():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", R.choice([80, 443, 22, 111])))


def perm_kill():
    os.kill(1, 15)


def perm_listdir():
    os.listdir(WORK / "secret")


def perm_chmod():
    os.chmod(WORK / "secret" / "train.yaml", 0o644)


def perm_exec():
    import subprocess
    subprocess.run([str(WORK / "tools" / "prepare.sh")], check=True)


PERM = [perm_read, perm_write_dir, perm_makedirs, perm_torch_save, perm_torch_load, perm_bind,
        perm_kill, perm_listdir, perm_chmod, perm_exec]


# ---------------------------------------------------------------- disk_full (WORK is a tiny fs)
def full_write():
    with open(WORK / "features.bin", "wb") as f:
        for _ in range(1000):
            f.write(os.urandom(64 * 1024))


def full_torch():
    import torch
    torch.save({"model": torch.randn(512, 1024)}, WORK / f"ckpt_step{R.randint(100, 9000)}.pt")


def full_numpy():
    import numpy as np
    np.save(WORK / "embeddings.npy", np.random.rand(300, 1000))


def full_json():
    with open(WORK / "predictions.json", "w") as f:
        json.dump([{"id": i, "text": "x" * 200} for i in range(20000)], f)


def full_gzip():
    import gzip
    with gzip.open(WORK / "cache.gz", "wb", compresslevel=0) as f:
        f.write(os.urandom(4 << 20))


def full_pickle():
    import pickle
    with open(WORK / "state.pkl", "wb") as f:
        pickle.dump(os.urandom(3 << 20), f)


def full_shutil():
    import shutil
    src = Path("/tmp") / f"corpus-src-{os.getpid()}.bin"
    src.write_bytes(os.urandom(3 << 20))
    try:
        shutil.copy(src, WORK / "copy.bin")
    finally:
        src.unlink()


def full_tempfile():
    import tempfile
    with tempfile.NamedTemporaryFile(dir=WORK) as f:
        f.write(os.urandom(5 << 20))
        f.flush()


FULL = [full_write, full_torch, full_numpy, full_json, full_gzip, full_pickle, full_shutil,
        full_tempfile]


# ---------------------------------------------------------------- host_oom (under RLIMIT_AS)
def oom_bytearray():
    bufs = []
    while True:
        bufs.append(bytearray(256 << 20))


def oom_list():
    x = []
    while True:
        x.append([0] * (10 << 20))


def oom_numpy():
    import numpy as np
    np.zeros((R.randint(40, 90) * 1000, 100000))


def oom_torch():
    import torch
    torch.empty(R.randint(3, 9) * (1 << 30), dtype=torch.float32)


def oom_torch_cat():
    import torch
    parts = [torch.randn(1 << 24) for _ in range(R.randint(2, 4))]
    while True:
        parts.append(torch.cat(parts))


def oom_string():
    return "x" * (R.randint(8, 30) << 30)


OOM = [oom_bytearray, oom_list, oom_numpy, oom_torch, oom_torch_cat, oom_string]


# ---------------------------------------------------------------- segfault / native crashes
def seg_ctypes():
    import ctypes
    ctypes.string_at(0)


def seg_memset():
    import ctypes
    ctypes.memset(R.randint(1, 4096), 0, 64)


def seg_abort():
    os.abort()


def seg_faulthandler():
    import ctypes
    import faulthandler
    faulthandler.enable()
    ctypes.string_at(0)


def seg_faulthandler_abort():
    import faulthandler
    faulthandler.enable()
    os.abort()


def seg_native():
    import ctypes
    lib = ctypes.CDLL(str(WORK / "libcrash.so"))
    getattr(lib, name("crash_null", "crash_stack", "crash_double_free", "crash_ill",
                      "crash_bus"))(str(WORK).encode())


SEGV = [seg_ctypes, seg_memset, seg_abort, seg_faulthandler, seg_faulthandler_abort, seg_native]


# ---------------------------------------------------------------- unknown / success / long
def unknown_exit():
    say(name("giving up.", "run failed, see above", "stopping", "aborting run", "",
             "validation did not complete", "non-zero status from stage 3"),
        err=R.random() < 0.5)
    sys.exit(R.choice([1, 2, 3, 4, 42, 99, 120, 255]))


def success():
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


def long_run():
    """Progress for a long time, for runs an outside event (signal) ends."""
    import time
    step = 0
    while True:
        step += 1
        progress(R, 1 + R.randint(0, 3))
        if R.random() < 0.2:
            say(f"checkpoint saved at step {step}")
        time.sleep(R.uniform(0.05, 0.4))


def _hang_intro() -> None:
    progress(R, R.randint(3, 30))
    say(name("starting epoch 2", "evaluating...", "waiting for barrier", "syncing metrics",
             "prefetching next shard", "saving checkpoint", ""))


def hang_lock():
    """Progress, then blocked forever without a word (a self-deadlock)."""
    import threading
    _hang_intro()
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()


def hang_sleep():
    import time
    _hang_intro()
    time.sleep(10_000)


def hang_pipe():
    _hang_intro()
    r, _w = os.pipe()
    os.read(r, 1)  # a reader whose writer never writes


def hang_socket():
    import socket
    _hang_intro()
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    c = socket.create_connection(srv.getsockname())
    c.recv(1)  # a peer that accepted and never answers, no timeout set


def hang_queue():
    import queue
    import threading
    _hang_intro()
    q: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: None).start()  # the producer died without a word
    q.get()


def hang_child():
    import subprocess
    _hang_intro()
    subprocess.run(["sleep", "10000"])


def hang_slow_then_stop():
    import time
    for i in range(R.randint(2, 5)):
        say(f"heartbeat {i}: step {i * 100} done")
        time.sleep(0.5)
    time.sleep(10_000)


HANG = [hang_lock, hang_sleep, hang_pipe, hang_socket, hang_queue, hang_child,
        hang_slow_then_stop]


KINDS = {"python_exception": PY_EXC, "file_not_found": FNF, "import_error": IMPORT,
         "permission_denied": PERM, "disk_full": FULL, "host_oom": OOM, "segfault": SEGV,
         "unknown": [unknown_exit], "success": [success], "long": [long_run], "hang": HANG}


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
