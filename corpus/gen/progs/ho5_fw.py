"""Held-out set 5's failing programs, run for real on a CPU: `ho5_fw.py SCENARIO [ARG ...]`.

Each scenario does some ordinary work first (a config line, a few steps) and then fails the way
its name says, by itself: the message comes from the library, Python, the C library or the
kernel (a real missing file, a real full tmpfs, a real rlimit, a real signal, a real NaN).
Frameworks are imported lazily, so a scenario pays only for its own.
"""

from __future__ import annotations

import os
import signal
import sys
import time

ARGS = sys.argv[2:]
ARG = ARGS[0] if ARGS else ""


def say(*a: object) -> None:
    print(*a, flush=True)


def steps(name: str, n: int = 3) -> None:
    say(f"-- {name}: pid={os.getpid()} node={os.uname().nodename}")
    for s in range(n):
        say(f"{name} step {s + 1}/{n}: loss {1.7 / (s + 1):.4f} lr 3.0e-04 "
            f"{212 + 11 * s} samples/s")
        time.sleep(0.03)


# ---------------------------------------------------------------- python_exception

def tok_pad() -> None:
    """A fast tokenizer built in memory has no pad token; batching with padding fails."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {w: i for i, w in enumerate(["[UNK]", "the", "cat", "sat", "on", "mat", "a"])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]")
    steps("collate", 2)
    batch = fast(["the cat sat", "a cat sat on the mat"], padding=True, return_tensors="pt")
    say(batch["input_ids"].shape)


def keras_dense_shape() -> None:
    import keras
    import numpy as np
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile("adam", "mse")
    say("features after the new preprocessing: 6 columns")
    model.fit(np.random.rand(64, 6), np.random.rand(64, 1), epochs=1, verbose=2)


def torch_view_stride() -> None:
    import torch
    steps("attn-pool", 2)
    x = torch.randn(4, 16, 32)
    y = x.transpose(1, 2)
    say(y.view(4, -1).shape)


def ray_task_error() -> None:
    import ray
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=True)

    @ray.remote
    def score(fold: int) -> float:
        hits, total = 37 * fold, 40 * fold
        return hits / total

    say("scoring 4 folds")
    say(ray.get([score.remote(f) for f in range(4)]))


def eval_crash_exit0() -> None:
    """An evaluation wrapper that prints the traceback and stops, but returns exit 0."""
    import traceback
    steps("eval", 3)
    results = {"bleu": 31.2, "chrf": 55.0}
    try:
        say("computing length ratio")
        ratio = results["hyp_len"] / results["ref_len"]
        say(ratio)
    except Exception:
        traceback.print_exc()
        say("evaluation crashed; exiting")
        return


# ---------------------------------------------------------------- file_not_found

def jit_load_missing() -> None:
    import torch
    steps("export-check", 2)
    torch.jit.load(ARG)


def tool_missing() -> None:
    import subprocess
    steps("audio-prep", 2)
    say("resampling clip_0001.wav to 16 kHz")
    subprocess.run(["ffmpeg", "-y", "-i", "clip_0001.wav", "-ar", "16000", "clip_0001.16k.wav"],
                   check=True)


def jit_load() -> None:
    import torch
    say(f"loading exported encoder {ARG}")
    enc = torch.jit.load(ARG)
    say(enc)


def keras_image_dir() -> None:
    import keras
    say(f"loading images from {ARG}")
    ds = keras.utils.image_dataset_from_directory(ARG, image_size=(64, 64), batch_size=8)
    say(ds)


# ---------------------------------------------------------------- import_error

def tf_automodel() -> None:
    steps("clf", 1)
    from transformers import TFAutoModelForSequenceClassification  # removed in transformers 5
    say(TFAutoModelForSequenceClassification)


def apex_amp() -> None:
    import torch
    say(f"torch {torch.__version__}; mixed precision via apex")
    from apex import amp
    say(amp)


def undefined_symbol() -> None:
    import ctypes
    say(f"loading fused kernels from {ARG}")
    ctypes.CDLL(ARG, mode=ctypes.RTLD_GLOBAL)


# ---------------------------------------------------------------- permission_denied

def keras_save() -> None:
    import keras
    import numpy as np
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile("adam", "mse")
    model.fit(np.random.rand(32, 4), np.random.rand(32, 2), epochs=2, verbose=2)
    say(f"saving to {ARG}")
    model.save(ARG)


def pl_ckpt_dir() -> None:
    import lightning as L
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    class Reg(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def training_step(self, batch, i):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.lin(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16)
    ck = L.pytorch.callbacks.ModelCheckpoint(dirpath=ARG, filename="{epoch}-{train_loss:.3f}")
    trainer = L.Trainer(max_epochs=2, callbacks=[ck], logger=False, enable_progress_bar=False,
                        accelerator="cpu")
    trainer.fit(Reg(), data)


def sqlite_open() -> None:
    import sqlite3
    steps("sweep", 2)
    say(f"recording trial results in {ARG}")
    db = sqlite3.connect(ARG)
    db.execute("create table if not exists trials (id integer, lr real, acc real)")


# ---------------------------------------------------------------- disk_full

def dcp_save() -> None:
    import torch
    import torch.distributed.checkpoint as dcp
    model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)])
    steps("pretrain", 3)
    say(f"saving distributed checkpoint to {ARG}")
    dcp.save({"model": model.state_dict()}, checkpoint_id=ARG)
    say("saved")


def tf_data_save() -> None:
    import tensorflow as tf
    ds = tf.data.Dataset.from_tensor_slices(tf.random.uniform((4096, 64)))
    say(f"caching preprocessed dataset to {ARG}")
    ds.save(ARG)
    say("cached")


def zip_results() -> None:
    import zipfile
    steps("report", 2)
    say(f"packing predictions into {ARG}")
    with zipfile.ZipFile(ARG, "w", compression=zipfile.ZIP_STORED) as z:
        for i in range(8):
            z.writestr(f"pred_{i:03d}.bin", os.urandom(200_000))
            say(f"  added pred_{i:03d}.bin")


# ---------------------------------------------------------------- host_oom

def _embed_chunk(i: int) -> int:
    import numpy as np
    m = np.ones((2000, 2000 * (i + 1)), dtype=np.float64)  # grows with the chunk index
    return int(m.sum())


def pool_memerror() -> None:
    import multiprocessing as mp
    steps("embed", 2)
    with mp.get_context("fork").Pool(2) as pool:
        for i, s in enumerate(pool.imap(_embed_chunk, range(200))):
            say(f"chunk {i} checksum {s}")


def bytes_cache() -> None:
    steps("reader", 2)
    cache = []
    for i in range(10_000):
        cache.append(bytearray(64 * 2**20))
        say(f"cached record block {i}: {(i + 1) * 64} MiB in RAM")


# ---------------------------------------------------------------- segfault

def torch_strided() -> None:
    import torch
    steps("unfold", 2)
    x = torch.zeros(16)
    y = torch.as_strided(x, (4096, 4096), (1 << 20, 1 << 18))
    say(float(y.sum()))


def memmap_truncated() -> None:
    """A feature file another job rewrites (truncates) while this one reads it via mmap."""
    import numpy as np
    path = ARG
    np.arange(4 << 20, dtype=np.float32).tofile(path)
    feats = np.memmap(path, dtype=np.float32, mode="r")
    say(f"mapped {path}: {feats.shape[0]} floats")
    for k in range(4):
        say(f"block {k} mean {feats[k << 20:(k + 1) << 20].mean():.1f}")
    say("(another job rewrites the feature file)")
    with open(path, "r+b") as f:
        f.truncate(4096)
    say(f"block 3 mean {feats[3 << 20:(3 << 20) + 1000].mean():.1f}")


# ---------------------------------------------------------------- killed

def pl_long() -> None:
    import lightning as L
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                           torch.nn.Linear(64, 1))

        def training_step(self, batch, i):
            x, y = batch
            time.sleep(0.05)
            return torch.nn.functional.mse_loss(self.net(x), y)

        def on_train_epoch_end(self):
            print(f"epoch {self.current_epoch} finished", flush=True)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    data = DataLoader(TensorDataset(torch.randn(512, 32), torch.randn(512, 1)), batch_size=32)
    trainer = L.Trainer(max_epochs=1000, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, accelerator="cpu")
    trainer.fit(Net(), data)


def jax_loop() -> None:
    import jax
    import jax.numpy as jnp
    w = jnp.zeros(16)

    @jax.jit
    def step(w, x):
        return w - 0.01 * (x @ w - 1.0) * x

    key = jax.random.PRNGKey(0)
    for i in range(10 ** 6):
        key, sub = jax.random.split(key)
        w = step(w, jax.random.normal(sub, (16,)))
        if i % 25 == 0:
            say(f"jax step {i} |w| {float(jnp.linalg.norm(w)):.4f}")
        time.sleep(0.02)


# ---------------------------------------------------------------- unknown

def quality_gate() -> None:
    steps("eval", 3)
    acc = 0.412
    say(f"val accuracy {acc:.3f}")
    if acc < 0.5:
        sys.exit(f"val accuracy {acc:.3f} below the 0.500 gate; not publishing this model")


# ---------------------------------------------------------------- success

def pl_cpu_ok() -> None:
    import lightning as L
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 1)

        def training_step(self, batch, i):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.lin(x), y)
            self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    data = DataLoader(TensorDataset(torch.randn(256, 8), torch.randn(256, 1)), batch_size=32)
    L.Trainer(max_epochs=3, default_root_dir=ARG or ".", enable_progress_bar=False).fit(
        Net(), data)
    say("training finished")


def shard_skip_ok() -> None:
    """A preprocessing pass that skips listed shards missing on disk and finishes its work."""
    done = 0
    for i in range(24):
        name = f"shard-{i:05d}.tar"
        if i in (7, 19):
            say(f"WARNING: skipping {name}: [Errno 2] No such file or directory "
                f"(listed in manifest, not on disk)")
            continue
        done += 1
        say(f"packed {name}: {1000 + 37 * i} samples")
    say(f"killed 0 stale workers; {done}/24 shards packed, 2 skipped")
    say("finished OK")


# ---------------------------------------------------------------- nan_divergence

def multinomial_nan() -> None:
    """A 4-gram char model trained with a far too high lr; sampling after the run blows up."""
    import torch
    torch.manual_seed(0)
    emb = torch.nn.Embedding(32, 64)
    hid = torch.nn.Linear(64 * 4, 256)
    head = torch.nn.Linear(256, 32)
    params = [*emb.parameters(), *hid.parameters(), *head.parameters()]
    opt = torch.optim.SGD(params, lr=20.0, momentum=0.9)

    def logits(ctx):
        return head(torch.relu(hid(emb(ctx).reshape(ctx.shape[0], -1))))

    for step in range(60):
        x = torch.randint(0, 32, (16, 5))
        loss = torch.nn.functional.cross_entropy(logits(x[:, :4]), x[:, 4])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 6 == 0:
            say(f"step {step} loss {loss.item():.4f}")
    say("training done; sampling 64 characters")
    ctx = torch.zeros(1, 4, dtype=torch.long)
    out = []
    for _ in range(64):
        probs = torch.softmax(logits(ctx), dim=-1)
        nxt = torch.multinomial(probs, 1)
        out.append(int(nxt))
        ctx = torch.cat([ctx[:, 1:], nxt], dim=1)
    say(out)


def hf_trainer_nan() -> None:
    import torch
    from torch.utils.data import Dataset
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    class Toy(Dataset):
        def __len__(self):
            return 256

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return {"input_ids": torch.randint(5, 99, (16,), generator=g),
                    "labels": torch.tensor(i % 2)}

    cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=32)
    torch.manual_seed(0)
    model = BertForSequenceClassification(cfg)
    args = TrainingArguments(output_dir=ARG, per_device_train_batch_size=16, num_train_epochs=3,
                             learning_rate=float(ARGS[1]) if len(ARGS) > 1 else 5e3,
                             logging_steps=4, save_strategy="no", report_to=[],
                             use_cpu=True, disable_tqdm=True, max_grad_norm=0.0)
    Trainer(model=model, args=args, train_dataset=Toy()).train()
    say("done")


# ---------------------------------------------------------------- dataloader_worker

class _Frames:
    """Video clips decoded in DataLoader workers; SIG names the signal the decoder dies of."""

    def __init__(self, sig: int, at: int) -> None:
        self.sig, self.at = sig, at

    def __len__(self) -> int:
        return 512

    def __getitem__(self, i: int):
        import torch
        if i == self.at:
            os.kill(os.getpid(), self.sig)
        return torch.full((3, 8, 8), float(i))


def dl_signal() -> None:
    import torch
    from torch.utils.data import DataLoader
    sig = {"ill": signal.SIGILL, "fpe": signal.SIGFPE}[ARG]
    loader = DataLoader(_Frames(sig, 83), batch_size=8, num_workers=2)
    for i, b in enumerate(loader):
        if i % 2 == 0:
            say(f"batch {i} mean {b.mean():.2f}")
        time.sleep(0.05)
    say(torch.__version__)


# ---------------------------------------------------------------- checkpoint_corrupt

def torch_load_pickle() -> None:
    import torch
    steps("resume", 1)
    say(f"resuming from {ARG}")
    state = torch.load(ARG, map_location="cpu", weights_only=False)
    say(list(state))


def jit_save() -> None:
    import torch
    torch.jit.script(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU())).save(ARG)


def keras_weights_make() -> None:
    import keras
    m = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32), keras.layers.Dense(4)])
    m.save_weights(ARG)


def keras_weights_load() -> None:
    import keras
    m = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32), keras.layers.Dense(4)])
    say(f"restoring weights from {ARG}")
    m.load_weights(ARG)
    say("restored")


def hf_save() -> None:
    from transformers import BertConfig, BertModel
    BertModel(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=64)).save_pretrained(ARG)


def hf_load() -> None:
    from transformers import AutoModel
    say(f"loading encoder from {ARG}")
    m = AutoModel.from_pretrained(ARG)
    say(type(m).__name__)


# ---------------------------------------------------------------- device_mismatch

def jax_two_devices() -> None:
    import jax
    import jax.numpy as jnp
    devs = jax.devices()
    say(f"devices: {devs}")
    a = jax.device_put(jnp.ones(8), devs[0])
    b = jax.device_put(jnp.ones(8), devs[1])

    @jax.jit
    def f(x, y):
        return x * y

    say(f(a, b))


def meta_index_add() -> None:
    """An embedding table built on the meta device (weights to be loaded later, never loaded);
    its rows are summed into a CPU bag buffer with index_add_."""
    import torch
    with torch.device("meta"):
        table = torch.nn.Embedding(50_000, 32)
    say(f"embedding table on {table.weight.device}: {tuple(table.weight.shape)}")
    ids = torch.tensor([17, 923, 4410, 5, 77])
    bags = torch.tensor([0, 0, 1, 1, 1])
    pooled = torch.zeros(2, 32)
    pooled.index_add_(0, bags, table(ids))
    say(pooled.sum())


# ---------------------------------------------------------------- storage_io

def fsspec_http() -> None:
    import fsspec
    url = f"http://127.0.0.1:{ARG}/shards/train-00012.tar"
    say(f"streaming {url}")
    with fsspec.open(url, "rb", block_size=0) as f:
        data = f.read()
    say(len(data))


# ---------------------------------------------------------------- collective_timeout

def pg_client_alone() -> None:
    import datetime

    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=ARG)
    say("rank 1/2: joining the process group (the master is rank 0)")
    dist.init_process_group("gloo", rank=1, world_size=2,
                            timeout=datetime.timedelta(seconds=10))
    say("joined")


# ---------------------------------------------------------------- hang

def requests_no_timeout() -> None:
    import requests
    steps("label-sync", 2)
    url = f"http://127.0.0.1:{ARG}/labels/v3.json"
    say(f"fetching {url}")
    r = requests.get(url)  # no timeout: waits for an answer that never comes
    say(r.status_code)


def _producer(q) -> None:
    q.put(b"x" * (4 << 20))  # larger than the pipe: put() blocks until someone reads


def queue_join() -> None:
    import multiprocessing as mp
    steps("shard-stats", 2)
    q = mp.Queue()
    p = mp.Process(target=_producer, args=(q,))
    p.start()
    say("waiting for the stats worker")
    p.join()  # joined before the queue is drained: both wait forever
    say(len(q.get()))


def ray_gpu_task() -> None:
    import ray
    ray.init(num_cpus=1, include_dashboard=False)

    @ray.remote(num_gpus=1)
    def embed(batch: int) -> int:
        return batch

    say("submitting 4 embedding tasks")
    say(ray.get([embed.remote(i) for i in range(4)]))


def ps_accept() -> None:
    """A parameter server waiting for workers that were never started (no timeout)."""
    import socket
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", int(ARG)))
    srv.listen(8)
    say(f"parameter server listening on 127.0.0.1:{ARG}, waiting for 4 workers")
    workers = [srv.accept() for _ in range(4)]
    say(f"{len(workers)} workers connected")


# ---------------------------------------------------------------- cuda_setup

def tf_strict_gpu() -> None:
    import tensorflow as tf
    tf.config.set_soft_device_placement(False)
    say(f"visible GPUs: {tf.config.list_physical_devices('GPU')}")
    with tf.device("/GPU:0"):
        x = tf.random.uniform((256, 256))
        say(float(tf.reduce_sum(x @ x)))


def hf_fp16() -> None:
    from transformers import TrainingArguments
    say("building training arguments (fp16)")
    args = TrainingArguments(output_dir=ARG, fp16=True, per_device_train_batch_size=8,
                             report_to=[])
    say(args.device)


def jax_cuda_env() -> None:
    import jax
    say(f"JAX_PLATFORMS={os.environ.get('JAX_PLATFORMS')}")
    say(jax.devices())


# ---------------------------------------------------------------- Slurm jobs' helpers

def slow_print() -> None:
    n = int(ARG or 10 ** 6)
    for i in range(n):
        say(f"it {i} epoch {i // 40} loss {2.0 / (i + 1):.5f}")
        time.sleep(0.25)


def ignore_term() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    say("SIGTERM ignored: finishing the epoch no matter what")
    slow_print()


def quiet_wait() -> None:
    steps("sync", 2)
    say("waiting for upstream job to publish its shards")
    time.sleep(10 ** 6)


if __name__ == "__main__":
    globals()[sys.argv[1]]()
