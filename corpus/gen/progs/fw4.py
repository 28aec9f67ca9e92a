"""Held-out set 4's failing programs, run for real on a CPU: `fw4.py SCENARIO [ARG ...]`.

Each scenario does some ordinary work (a config line, a few steps) and then fails the way its
name says, by itself: the message comes from the library, Python, the C library or the kernel
(a real missing file, a real full tmpfs, a real rlimit, a real signal, a real NaN). Frameworks
are imported lazily, so a scenario pays only for its own.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

ARGS = sys.argv[2:]
ARG = ARGS[0] if ARGS else ""


def say(*a: object) -> None:
    print(*a, flush=True)


def warmup(name: str, steps: int = 3) -> None:
    say(f"== {name} | pid {os.getpid()} | host {os.uname().nodename}")
    for s in range(steps):
        say(f"[{name}] iter {s:03d}  loss={2.0 / (s + 1):.4f}  throughput={118 + 7 * s} it/s")
        time.sleep(0.03)


# ---------------------------------------------------------------- python_exception

def jax_tracer_bool() -> None:
    import jax
    import jax.numpy as jnp
    warmup("jax-clip")

    @jax.jit
    def clip_update(g):
        if jnp.linalg.norm(g) > 1.0:  # Python control flow on a traced value
            g = g / jnp.linalg.norm(g)
        return g

    say(clip_update(jnp.ones(8)))


def pool_lambda() -> None:
    import multiprocessing as mp
    warmup("feature-pool")
    scale = 3.0
    with mp.get_context("spawn").Pool(2) as pool:
        say(pool.map(lambda v: v * scale, range(16)))


def yaml_config() -> None:
    import yaml
    path = ARG
    with open(path, "w") as f:
        f.write("model:\n  name: vit_b16\n  layers: 12\n optimizer: adamw\n  lr: 3e-4\n")
    warmup("vit-config", 1)
    with open(path) as f:
        say(yaml.safe_load(f))


def pl_validate_noloader() -> None:
    import lightning as L
    import torch
    from torch import nn

    class M(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(4, 1)

        def validation_step(self, batch, i):
            return None

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters())
    warmup("pl-validate", 1)
    L.Trainer(accelerator="cpu", logger=False).validate(M())


def tf_ragged() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import tensorflow as tf
    warmup("tf-text", 2)
    seqs = [[3, 7, 1], [4, 2], [9, 9, 9, 1]]
    ds = tf.data.Dataset.from_tensor_slices(seqs)
    for b in ds:
        say(b)


def caught_exit0() -> None:
    import logging
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                        stream=sys.stdout)
    log = logging.getLogger("train")
    vocab = {"<pad>": 0, "cat": 1, "dog": 2}
    batches = [["cat", "dog"], ["dog", "dog"], ["cat", "cat"], ["cat", "bird"]]
    try:
        for epoch, batch in enumerate(batches):
            ids = [vocab[w] for w in batch]
            log.info("epoch %d: %d tokens, loss %.3f", epoch, len(ids), 1.0 / (epoch + 1))
    except Exception:
        log.exception("epoch %d failed, giving up", epoch)
        return
    log.info("all epochs done")


# ---------------------------------------------------------------- file_not_found

def tokenizer_missing() -> None:
    from tokenizers import Tokenizer
    warmup("tok-load", 2)
    Tokenizer.from_file(ARG)


def h5_missing() -> None:
    import h5py
    warmup("h5-features", 2)
    with h5py.File(ARG, "r") as f:
        say(list(f))


def keras_load_missing() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import keras
    warmup("keras-eval", 2)
    keras.saving.load_model(ARG)


def safetensors_missing() -> None:
    from safetensors.torch import load_file
    warmup("st-load", 2)
    load_file(ARG)


def np_loadtxt_missing() -> None:
    import numpy as np
    warmup("labels", 2)
    np.loadtxt(ARG, delimiter=",")


# ---------------------------------------------------------------- import_error

def pl_removed_name() -> None:
    warmup("pl-bar", 1)
    from lightning.pytorch.callbacks import ProgressBarBase  # noqa: F401  (removed in 2.0)


def keras_plot_model() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import keras
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    warmup("keras-viz", 1)
    keras.utils.plot_model(m, to_file=ARG or "/tmp/model.png")


def keras_experimental() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    warmup("keras-prep", 1)
    from keras.layers.experimental import preprocessing  # noqa: F401  (gone in Keras 3)


def jax_removed() -> None:
    import jax  # noqa: F401
    warmup("jax-sharding", 1)
    from jax.experimental.maps import xmap  # noqa: F401  (removed from JAX)


# ---------------------------------------------------------------- permission_denied / disk_full

def h5_write() -> None:
    import h5py
    import numpy as np
    warmup("h5-dump", 2)
    with h5py.File(ARG, "w") as f:
        for i in range(200):
            f.create_dataset(f"emb_{i:04d}", data=np.random.rand(256, 64))
            if i % 20 == 0:
                say(f"wrote shard {i}")
            f.flush()


def tokenizer_save() -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    words = [f"token{i} word{i % 97} piece{i % 13} sample{i * 7}" for i in range(4000)]
    tok.train_from_iterator(words, trainers.BpeTrainer(vocab_size=3000, special_tokens=["[UNK]"]))
    say(f"trained tokenizer, vocab {tok.get_vocab_size()}")
    tok.save(ARG)


def tf_summary() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import tensorflow as tf
    warmup("tf-summary", 2)
    w = tf.summary.create_file_writer(ARG)
    with w.as_default():
        for s in range(50):
            tf.summary.scalar("loss", 1.0 / (s + 1), step=s)
    w.flush()
    say("summaries written")


def tf_write_file() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import tensorflow as tf
    warmup("tf-export", 2)
    for i in range(20):
        tf.io.write_file(f"{ARG}/part-{i:03d}.bin", tf.random.uniform([65536]).numpy().tobytes())
        say(f"exported part {i}")


def sqlite_fill() -> None:
    import sqlite3
    warmup("metrics-db", 1)
    con = sqlite3.connect(ARG)
    con.execute("create table if not exists m (step int, name text, blob blob)")
    for i in range(100000):
        con.execute("insert into m values (?, ?, ?)", (i, "loss", os.urandom(2048)))
        if i % 200 == 0:
            con.commit()
            say(f"committed step {i}")
    con.commit()


def hub_dir() -> None:
    import torch
    warmup("hub-cache", 1)
    torch.hub.load_state_dict_from_url("http://127.0.0.1:9/weights/resnet18-f37072fd.pth")


# ---------------------------------------------------------------- host_oom

def thread_memerror() -> None:
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    warmup("parallel-featurize", 2)

    def featurize(k: int):
        return np.outer(np.arange(k * 20000.0), np.arange(k * 20000.0)).sum()

    with ThreadPoolExecutor(4) as ex:
        for r in ex.map(featurize, [1, 2, 3]):
            say(f"feature block sum {r:.3e}")


def ray_memory_monitor() -> None:
    import ray
    ray.init(num_cpus=1, include_dashboard=False)
    warmup("ray-preprocess", 1)

    @ray.remote(max_retries=0)
    def grow():
        hoard = []
        for _ in range(400):
            hoard.append(bytearray(64 << 20))
            time.sleep(0.05)
        return len(hoard)

    say(ray.get(grow.remote()))


def big_embedding() -> None:
    import torch
    warmup("big-embed", 2)
    emb = torch.nn.Embedding(int(ARG or 400_000_000), 16)
    say(emb.weight.shape)


# ---------------------------------------------------------------- segfault

def deep_recursion() -> None:
    sys.setrecursionlimit(10 ** 7)
    warmup("tree-parse", 2)

    import pickle
    tree: list = []
    node = tree
    for _ in range(2_000_000):  # a parse tree that degenerated into a chain
        node.append([])
        node = node[0]
    say("tree built, caching it to disk")
    say(len(pickle.dumps(tree)))


def bad_strides() -> None:
    import numpy as np
    from numpy.lib.stride_tricks import as_strided
    warmup("window-view", 2)
    a = np.zeros(16)
    v = as_strided(a, shape=(1 << 20, 1 << 10), strides=(1 << 22, 8))
    say(v.sum())


# ---------------------------------------------------------------- killed / unknown / success

def keras_long() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import keras
    import numpy as np
    m = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(1)])
    m.compile(optimizer="adam", loss="mse")
    x, y = np.random.rand(4096, 32), np.random.rand(4096, 1)
    m.fit(x, y, epochs=10000, batch_size=64, verbose=2)


def tf_no_gpu_ok() -> None:
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    say(f"GPUs visible: {len(gpus)}; running on CPU")
    x = tf.random.uniform([256, 256])
    for i in range(3):
        x = tf.linalg.matmul(x, x) / 256.0
        say(f"matmul round {i}: mean {float(tf.reduce_mean(x)):.5f}")
    say("benchmark done")


def ds_init() -> None:
    import deepspeed
    import torch
    say(f"deepspeed {deepspeed.__version__}, torch {torch.__version__}")
    m = torch.nn.Linear(64, 64)
    cfg = {"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}}
    deepspeed.initialize(model=m, model_parameters=m.parameters(), config=cfg)


def _square(v: int) -> int:
    if v == 37:  # this worker is SIGKILLed mid-task, as the kernel's OOM killer would
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.01)
    return v * v


def pool_worker_lost() -> None:
    import multiprocessing as mp
    warmup("pool-features", 2)
    with mp.get_context("fork").Pool(4) as pool:
        say("scoring 64 items on 4 processes")
        say(sum(pool.map(_square, range(64), chunksize=4)))


def tf_memory_growth() -> None:
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"
    import tensorflow as tf
    warmup("tf-setup", 1)
    gpus = tf.config.list_physical_devices("GPU")
    say("Num GPUs Available: ", len(gpus))
    tf.config.experimental.set_memory_growth(gpus[0], True)
    say("memory growth on")


def ds_report() -> None:
    import deepspeed
    warmup("ds-env", 1)
    from deepspeed.env_report import main
    main()
    say(f"deepspeed {deepspeed.__version__} ok")


def pl_earlystop_ok() -> None:
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import EarlyStopping
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    torch.manual_seed(0)
    x = torch.randn(128, 8)
    y = x.sum(1, keepdim=True)

    class M(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(8, 1)

        def training_step(self, b, i):
            return nn.functional.mse_loss(self.l(b[0]), b[1])

        def validation_step(self, b, i):
            self.log("val_loss", nn.functional.mse_loss(self.l(b[0]), b[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)
    dl = DataLoader(TensorDataset(x, y), batch_size=32)
    tr = L.Trainer(max_epochs=200, accelerator="cpu", logger=False, enable_checkpointing=False,
                   enable_progress_bar=False,
                   callbacks=[EarlyStopping("val_loss", patience=3, min_delta=1e-3,
                                            verbose=True)])
    tr.fit(M(), dl, dl)
    say(f"stopped at epoch {tr.current_epoch}")


def nan_skipped_ok() -> None:
    import torch
    torch.manual_seed(1)
    w = torch.zeros(4, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    for step in range(40):
        x = torch.randn(16, 4)
        n = torch.tensor(0.0 if step == 17 else 16.0)  # one empty batch after filtering
        y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0])
        loss = ((x @ w - y) ** 2).sum() / n * (n > 0) if step != 17 else \
            ((x @ w - y) ** 2).sum() * 0 / n
        if not torch.isfinite(loss):
            say(f"step {step}: loss is {loss.item()}, skipping batch")
            continue
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 5 == 0:
            say(f"step {step}: loss {loss.item():.4f}")
    say(f"final weights {[round(v, 2) for v in w.tolist()]}")


def unittest_ok() -> None:
    import unittest

    class T(unittest.TestCase):
        def test_oom_error_is_reported(self):
            self.assertIn("CUDA out of memory", "RuntimeError: CUDA out of memory. Tried ...")

        def test_segfault_exit_code(self):
            self.assertEqual(128 + signal.SIGSEGV, 139)

        def test_nan_loss_guard(self):
            self.assertTrue(float("nan") != float("nan"))
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(T)
    unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(suite)


# ---------------------------------------------------------------- nan_divergence

def keras_nan_exit0() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import keras
    import numpy as np
    rng = np.random.default_rng(0)
    x = rng.random((512, 8)) * 1e3
    y = x.sum(1, keepdims=True) * 1e3
    m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1)])
    m.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    m.fit(x, y, epochs=6, batch_size=64, verbose=2)
    say("training finished, saving predictions")


def pl_earlystop_nan() -> None:
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import EarlyStopping
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    torch.manual_seed(0)
    x = torch.randn(256, 8) * 100
    y = x.sum(1, keepdim=True) * 100

    class M(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.l = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))

        def training_step(self, b, i):
            loss = nn.functional.mse_loss(self.l(b[0]), b[1])
            self.log("train_loss", loss)
            return loss

        def validation_step(self, b, i):
            self.log("val_loss", nn.functional.mse_loss(self.l(b[0]), b[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.5)
    dl = DataLoader(TensorDataset(x, y), batch_size=32)
    tr = L.Trainer(max_epochs=50, accelerator="cpu", logger=False, enable_checkpointing=False,
                   enable_progress_bar=False,
                   callbacks=[EarlyStopping("val_loss", patience=20, check_finite=True,
                                            verbose=True)])
    tr.fit(M(), dl, dl)
    say(f"fit returned at epoch {tr.current_epoch}")


def half_overflow() -> None:
    import torch
    torch.manual_seed(0)
    w = torch.randn(64, 64, dtype=torch.bfloat16) * 4
    h = torch.randn(8, 64, dtype=torch.float16)
    for layer in range(12):
        h = (h @ w.to(torch.float16)) * 3
        m = h.abs().max().item()
        say(f"layer {layer}: max activation {m}")
        if not torch.isfinite(h).all():
            raise FloatingPointError(f"non-finite activations after layer {layer} (fp16)")


def jax_sgd_blowup() -> None:
    import jax
    import jax.numpy as jnp
    key = jax.random.PRNGKey(0)
    x = jax.random.normal(key, (256, 4)) * 50
    y = x @ jnp.array([1.0, -1.0, 2.0, 0.5])
    w = jnp.zeros(4)

    def loss(w):
        return jnp.mean((x @ w - y) ** 2)
    g = jax.jit(jax.value_and_grad(loss))
    for step in range(200):
        val, grad = g(w)
        w = w - 0.01 * grad
        say(f"step {step:4d} loss {float(val):.6g}")
        if not bool(jnp.isfinite(val)):
            say("loss is not finite, aborting run")
            sys.exit(3)


# ---------------------------------------------------------------- dataloader_worker

class _Shards:
    """An iterable of shards for DataLoader workers; DIE says how a worker ends."""

    def __init__(self, how: str):
        self.how = how

    def __iter__(self):
        import torch
        info = torch.utils.data.get_worker_info()
        for i in range(10 ** 6):
            if info and info.id == 1 and i == 40:
                if self.how == "abort":
                    os.abort()
                if self.how == "term":
                    os.kill(os.getpid(), signal.SIGTERM)
                if self.how == "shm":
                    yield torch.zeros(64 << 20, dtype=torch.uint8)  # through /dev/shm
            yield torch.full((8,), float(i))


def dl_iter() -> None:
    import torch
    from torch.utils.data import DataLoader, IterableDataset

    class D(IterableDataset):
        def __iter__(self):
            return iter(_Shards(ARG))
    warmup("stream-train", 1)
    for n, b in enumerate(DataLoader(D(), batch_size=4, num_workers=2)):
        if n % 25 == 0:
            say(f"batch {n} mean {b.mean().item():.1f}")
        if n > 2000:
            break
    torch.manual_seed(0)


# ---------------------------------------------------------------- checkpoint_corrupt

def keras_h5_make() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import keras
    m = keras.Sequential([keras.Input((32,)), keras.layers.Dense(512), keras.layers.Dense(10)])
    m.save_weights(ARG)


def keras_h5_load() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import keras
    m = keras.Sequential([keras.Input((32,)), keras.layers.Dense(512), keras.layers.Dense(10)])
    warmup("keras-resume", 1)
    m.load_weights(ARG)
    say("weights restored")


def tf_savedmodel_make() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import tensorflow as tf

    class Scale(tf.Module):
        def __init__(self):
            self.w = tf.Variable(2.0)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def __call__(self, x):
            return x * self.w
    tf.saved_model.save(Scale(), ARG)


def tf_savedmodel_load() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import tensorflow as tf
    warmup("serve", 1)
    m = tf.saved_model.load(ARG)
    say(m(tf.constant([1.0, 2.0])))


def torch_make() -> None:
    import torch
    torch.save({"model": torch.nn.Linear(256, 256).state_dict(), "epoch": 7}, ARG)


def torch_resume() -> None:
    import torch
    warmup("resume", 2)
    ck = torch.load(ARG, map_location="cpu")
    say(f"resumed from epoch {ck['epoch']}")


# ---------------------------------------------------------------- device_mismatch

def accel_empty_weights() -> None:
    import torch
    from accelerate import init_empty_weights
    from torch import nn
    warmup("lazy-init", 1)
    with init_empty_weights():
        model = nn.Sequential(nn.Embedding(1000, 64), nn.Linear(64, 1000))
    say("model skeleton built; weights are loaded by the checkpoint hook")
    ids = torch.randint(0, 1000, (2, 16))
    logits = model(ids)
    loss = nn.functional.cross_entropy(logits.view(-1, 1000), ids.view(-1))
    say(f"first loss {loss}")


def meta_mask() -> None:
    import torch
    from torch import nn

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("causal", torch.ones(64, 64, dtype=torch.bool).triu(1))
            self.qk = nn.Linear(32, 64)

        def forward(self, x):
            q, k = self.qk(x).chunk(2, -1)
            s = q @ k.transpose(-1, -2)
            n = x.shape[1]
            return s.masked_fill(self.causal[:n, :n], float("-inf")).softmax(-1)
    warmup("attn", 1)
    with torch.device("meta"):
        m = Attn()
    m.qk = nn.Linear(32, 64)  # only the weights are materialised from the checkpoint
    say("weights loaded for qk; running a smoke test")
    say(m(torch.randn(2, 10, 32)).shape)


# ---------------------------------------------------------------- storage_io

def hub_reset() -> None:
    from huggingface_hub import hf_hub_download
    warmup("fetch-weights", 1)
    hf_hub_download("org/model", "pytorch_model.bin", cache_dir=ARG)


def retry_503() -> None:
    import urllib.error
    import urllib.request
    url = f"http://127.0.0.1:{ARG}/bucket/shards/train-00042.tar"
    for attempt in range(1, 4):
        try:
            urllib.request.urlopen(url, timeout=10).read()
            return
        except urllib.error.HTTPError as e:
            if attempt == 3:
                raise
            say(f"GET {url} -> {e.code}, retrying in {attempt}s (attempt {attempt}/3)")
            time.sleep(attempt)


def serve_503() -> None:
    """Setup helper, not a case: an object store answering 503 SlowDown for 60 s on ARG."""
    import http.server

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = (b"<?xml version='1.0'?><Error><Code>SlowDown</Code><Message>Please reduce "
                    b"your request rate.</Message></Error>")
            self.send_response(503, "Slow Down")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", int(ARG)), H)
    srv.timeout = 1
    end = time.time() + 60
    while time.time() < end:
        srv.handle_request()


def ftp_stall() -> None:
    import ftplib
    warmup("fetch-shards", 1)
    ftp = ftplib.FTP(timeout=4)
    ftp.connect("127.0.0.1", int(ARG))
    ftp.login()


def urlretrieve_short() -> None:
    import urllib.request
    warmup("download", 1)
    urllib.request.urlretrieve(f"http://127.0.0.1:{ARG}/shards/train-00017.tar",
                               "/tmp/fw4-shard.tar")


# ---------------------------------------------------------------- collective_timeout

def store_wait() -> None:
    import datetime

    import torch.distributed as dist
    port = int(ARG)
    store = dist.TCPStore("127.0.0.1", port, 2, True, timeout=datetime.timedelta(seconds=6),
                          wait_for_workers=False)
    say("rank 0: store up, waiting for rank 1 to publish its address")
    store.wait(["rank1/addr"])


def init_pg_alone() -> None:
    import datetime

    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=ARG)
    say("rank 0 of 2: init_process_group(gloo)")
    dist.init_process_group("gloo", rank=0, world_size=2, timeout=datetime.timedelta(seconds=8))
    say("initialised")


# ---------------------------------------------------------------- hang

def pipe_deadlock() -> None:
    import subprocess
    warmup("external-tokenizer", 2)
    p = subprocess.Popen([sys.executable, "-c", "import sys\nfor l in sys.stdin: "
                          "sys.stdout.write(l * 4)"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE)
    say("feeding 200000 lines to the tokenizer")
    for i in range(200000):
        p.stdin.write(b"the quick brown fox %d\n" % i)  # the child's stdout is never read
    p.stdin.close()
    say(len(p.stdout.read()))


def fork_lock() -> None:
    import threading

    import torch
    from torch.utils.data import DataLoader, Dataset
    lock = threading.Lock()

    class D(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            with lock:  # held by the parent's thread at fork time: never released here
                return torch.tensor([float(i)])

    def holder():
        with lock:
            time.sleep(3)
    warmup("cache-ds", 2)
    threading.Thread(target=holder, daemon=True).start()
    time.sleep(0.2)
    say("starting epoch 0 with 2 workers")
    for b in DataLoader(D(), batch_size=8, num_workers=2):
        say(f"batch {b.sum().item()}")


# ---------------------------------------------------------------- node_failure

def ray_far_task() -> None:
    import ray
    ray.init(address=ARG)
    say("cluster nodes alive:", len([n for n in ray.nodes() if n["Alive"]]))

    @ray.remote(resources={"far": 1}, max_retries=0)
    def shard(i):
        for _ in range(1000):
            time.sleep(0.5)
        return i

    say("scheduling shard 3 of the preprocessing on the far node")
    say(ray.get(shard.remote(3), timeout=120))


def reap_cwd() -> None:
    """Cleanup, not a case: SIGKILL the processes started from this directory (a local Ray
    cluster's daemons), by pid, sparing this process and its parent shell."""
    here = os.getcwd()
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) in (os.getpid(), os.getppid()):
            continue
        try:
            if os.readlink(f"/proc/{p}/cwd") == here:
                os.kill(int(p), signal.SIGKILL)
        except OSError:
            pass


# ---------------------------------------------------------------- misc

def sleep_print() -> None:
    n = int(ARG or 10 ** 6)
    for i in range(n):
        say(f"epoch {i // 50} it {i} loss {1 / (i + 1):.5f}")
        time.sleep(0.2)


def sigterm_handler() -> None:
    def on_term(sig, frame):
        say(f"caught signal {sig}, flushing metrics and exiting")
        sys.exit(143)
    signal.signal(signal.SIGTERM, on_term)
    sleep_print()


def null_read() -> None:
    ctypes.string_at(0)


if __name__ == "__main__":
    globals()[sys.argv[1]]()
