"""Failing training programs across frameworks, run for real on a CPU: `fw.py SCENARIO [ARG]`.

Each scenario does ordinary work (config, a few steps, progress) and then fails the way the
scenario says, by itself: a wrong shape, a missing file, a real rlimit, a real signal, a real
timeout. Nothing here prints an error message by hand; messages come from the frameworks,
Python and the kernel. Scenarios import their framework lazily.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import time

ARG = sys.argv[2] if len(sys.argv) > 2 else ""
log = logging.getLogger("train")


def setup_logging(fmt: int = 0) -> None:
    formats = ["%(asctime)s %(levelname)s %(name)s: %(message)s",
               "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s",
               "%(levelname)s:%(name)s:%(message)s"]
    logging.basicConfig(level=logging.INFO, format=formats[fmt % 3], stream=sys.stdout)


def preamble(name: str, steps: int = 4) -> None:
    setup_logging(len(name))
    log.info("experiment %s, seed %d, world size 1", name, len(name) * 7)
    log.info("config: lr=3e-4 batch=32 epochs=10 workers=2 amp=False")
    for s in range(steps):
        log.info("step %d loss %.4f lr %.2e", s * 10, 2.3 - s * 0.11, 3e-4)
        time.sleep(0.05)


# ---------------------------------------------------------------- TensorFlow / Keras

def _tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0")
    import tensorflow as tf
    return tf


def _keras_model(tf, n_in: int = 8):
    m = tf.keras.Sequential([tf.keras.Input((n_in,)), tf.keras.layers.Dense(16, activation="relu"),
                             tf.keras.layers.Dense(1)])
    m.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss="mse")
    return m


def tf_shape() -> None:
    tf = _tf()
    import numpy as np
    preamble("tf-regression")
    m = _keras_model(tf, 8)
    x, y = np.random.rand(64, 12).astype("float32"), np.random.rand(64, 1).astype("float32")
    m.fit(x, y, epochs=2, batch_size=16, verbose=2)


def tf_oom() -> None:
    tf = _tf()
    preamble("tf-embed")
    rows = int(ARG or 400_000)
    emb = tf.Variable(tf.random.normal([rows, 512]))
    log.info("embedding table ready: %s", emb.shape)
    big = tf.matmul(emb, emb, transpose_b=True)
    log.info("similarity %s", big.shape)


def tf_notfound() -> None:
    tf = _tf()
    preamble("tf-ingest")
    files = ["/data/shards/train-00000-of-00128.tfrecord"]
    ds = tf.data.TFRecordDataset(files)
    for rec in ds.take(4):
        log.info("record %d bytes", len(rec.numpy()))


def tf_readfile() -> None:
    tf = _tf()
    preamble("tf-vocab")
    text = tf.io.read_file(ARG or "/scratch/run42/vocab/wordpiece.txt")
    log.info("vocab %d bytes", len(text.numpy()))


def tf_checknumerics() -> None:
    tf = _tf()
    import numpy as np
    preamble("tf-check")
    m = _keras_model(tf, 8)
    opt = tf.keras.optimizers.SGD(5.0)
    x = tf.constant(np.random.rand(64, 8).astype("float32") * 50)
    y = tf.constant(np.random.rand(64, 1).astype("float32") * 1000)
    for step in range(200):
        with tf.GradientTape() as tape:
            loss = tf.debugging.check_numerics(tf.reduce_mean((m(x) - y) ** 2), "training loss")
        grads = tape.gradient(loss, m.trainable_variables)
        opt.apply_gradients(zip(grads, m.trainable_variables, strict=True))
        print(f"step {step} loss {float(loss):.4g}", flush=True)


def tf_terminate_on_nan() -> None:
    tf = _tf()
    import numpy as np
    preamble("tf-nan")
    m = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(32),
                             tf.keras.layers.Dense(1)])
    m.compile(optimizer=tf.keras.optimizers.SGD(3.0), loss="mse")
    x = np.random.rand(256, 8).astype("float32") * 100
    y = np.random.rand(256, 1).astype("float32") * 1e4
    m.fit(x, y, epochs=20, batch_size=32, verbose=2,
          callbacks=[tf.keras.callbacks.TerminateOnNaN()])
    print("training finished", flush=True)


def tf_ok() -> None:
    tf = _tf()
    import numpy as np
    preamble("tf-ok")
    m = _keras_model(tf, 8)
    x, y = np.random.rand(128, 8).astype("float32"), np.random.rand(128, 1).astype("float32")
    h = m.fit(x, y, epochs=3, batch_size=32, verbose=2)
    nan_count = int(np.isnan(h.history["loss"]).sum())
    print(f"eval: mse={h.history['loss'][-1]:.4f} nan_count={nan_count} errors=0", flush=True)


def tf_save() -> None:
    tf = _tf()
    import numpy as np
    preamble("tf-save")
    m = tf.keras.Sequential([tf.keras.Input((256,)), tf.keras.layers.Dense(2048),
                             tf.keras.layers.Dense(10)])
    m.compile(optimizer="adam", loss="mse")
    m.fit(np.random.rand(32, 256), np.random.rand(32, 10), epochs=1, verbose=2)
    m.save(os.path.join(ARG, "model.keras"))
    print("saved", flush=True)


def tf_ckpt_restore() -> None:
    tf = _tf()
    preamble("tf-resume")
    v = tf.Variable(tf.zeros([512, 512]))
    ck = tf.train.Checkpoint(w=v)
    ck.restore(ARG).assert_consumed()
    log.info("restored %s", ARG)


def tf_ckpt_make() -> None:
    tf = _tf()
    v = tf.Variable(tf.random.normal([512, 512]))
    print(tf.train.Checkpoint(w=v).write(ARG))


def tf_gpu() -> None:
    tf = _tf()
    preamble("tf-gpu", 2)
    gpus = tf.config.list_physical_devices("GPU")
    tf.config.experimental.set_memory_growth(gpus[0], True)
    log.info("memory growth on %s", gpus[0].name)


def tf_import() -> None:
    _tf()
    preamble("tf-addons")
    # (not installed here, as in the user's environment; the comment stays off the import
    # line, which the traceback shows)
    import tensorflow_addons as tfa  # noqa: F401


# ---------------------------------------------------------------- JAX

def jax_shape() -> None:
    import jax
    import jax.numpy as jnp
    preamble("jax-mlp")
    w = jax.random.normal(jax.random.PRNGKey(0), (128, 64))
    x = jnp.ones((32, 100))

    @jax.jit
    def fwd(w, x):
        return jnp.tanh(x @ w).sum()
    print(jax.grad(fwd)(w, x))


def jax_oom() -> None:
    import jax.numpy as jnp
    preamble("jax-big")
    n = int(ARG or 60000)
    a = jnp.ones((n, n), dtype=jnp.float32)
    print((a @ a).sum())


def jax_nan() -> None:
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_debug_nans", True)
    preamble("jax-nan")
    w = jnp.ones((8,))
    x = jnp.linspace(-3, 3, 64).reshape(8, 8) * 40

    def loss(w):
        # (x @ w has negative entries: the log of them is nan)
        return jnp.mean(jnp.log(x @ w))
    for step in range(3):
        g = jax.grad(loss)(w)
        w = w - 0.1 * g
        print(f"step {step} |w|={float(jnp.linalg.norm(w)):.3f}", flush=True)


def jax_gpu() -> None:
    import jax
    preamble("jax-gpu")
    dev = jax.devices("gpu")[0]
    print(dev)


def jax_dist_timeout() -> None:
    import jax
    preamble("jax-multihost")
    port = int(ARG or 29811)
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                               process_id=0, initialization_timeout=15)
    print(jax.devices())


def jax_ok() -> None:
    import jax
    import jax.numpy as jnp
    preamble("jax-ok")
    w = jnp.zeros((8,))
    x = jax.random.normal(jax.random.PRNGKey(1), (64, 8))
    y = x @ jnp.arange(8.0)
    for step in range(30):
        g = jax.grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
        w = w - 0.05 * g
        if step % 10 == 0:
            loss = float(jnp.mean((x @ w - y) ** 2))
            print(f"step {step} loss {loss:.4f} nan_steps=0 inf_grads=0 errors: 0", flush=True)
    print("done; skipped batches with nan: 0", flush=True)


# ---------------------------------------------------------------- Lightning

def _pl_module(kind: str = "ok"):
    import lightning as L
    import torch
    from torch import nn

    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
            self.lr = 50.0 if kind == "nan" else 1e-2

        def training_step(self, batch, _i):
            x, y = batch
            if kind == "bigalloc" and self.global_step == 3:
                torch.empty(int(ARG or 6e9) // 4, dtype=torch.float32).fill_(1)
            loss = nn.functional.mse_loss(self.lin(x), y)
            self.log("train_loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    if kind == "noopt":
        del Net.configure_optimizers
    return Net()


class _DS:
    def __init__(self, n=256, die=None, scale=1.0):
        import torch
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 16, generator=g) * scale
        self.y = torch.randn(n, 1, generator=g) * scale * scale
        self.die = die

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if self.die and i == 100:
            how = self.die
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif how == "segv":
                ctypes.string_at(0)
            elif how == "bus":
                os.kill(os.getpid(), signal.SIGBUS)
            elif how == "exit":
                os._exit(3)
        return self.x[i], self.y[i]


def _pl_fit(kind="ok", die=None, workers=0, scale=1.0, **tkw):
    import lightning as L
    from torch.utils.data import DataLoader
    preamble("pl-" + kind, 2)
    dl = DataLoader(_DS(die=die, scale=scale), batch_size=16, num_workers=workers)
    kw = dict(max_epochs=3, accelerator="cpu", logger=False, enable_checkpointing=False)
    kw.update(tkw)
    trainer = L.Trainer(**kw)
    ckpt = kw.pop("ckpt_path", None)
    trainer.fit(_pl_module(kind), dl, ckpt_path=ckpt)
    return trainer


def pl_ok() -> None:
    _pl_fit("ok", workers=0)
    print("fit complete", flush=True)


def pl_noopt() -> None:
    _pl_fit("noopt")


def pl_gpu() -> None:
    _pl_fit("ok", accelerator="gpu", devices=2)


def pl_anomaly() -> None:
    _pl_fit("nan", scale=30.0, detect_anomaly=True)


def pl_ckpt() -> None:
    import lightning as L
    from torch.utils.data import DataLoader
    preamble("pl-resume", 2)
    trainer = L.Trainer(max_epochs=4, accelerator="cpu", logger=False,
                        enable_checkpointing=False)
    trainer.fit(_pl_module(), DataLoader(_DS(), batch_size=16), ckpt_path=ARG)


def pl_save() -> None:
    t = _pl_fit("ok", max_epochs=1)
    t.save_checkpoint(os.path.join(ARG, "epoch=0-step=16.ckpt"))
    print("checkpoint written", flush=True)


def pl_rootdir() -> None:
    _pl_fit("ok", max_epochs=1, default_root_dir=ARG, enable_checkpointing=True)


def pl_worker() -> None:
    _pl_fit("ok", die=os.environ.get("DIE", "kill"), workers=2)


def pl_bigalloc() -> None:
    _pl_fit("bigalloc")


def pl_meta() -> None:
    import lightning as L
    import torch
    from torch.utils.data import DataLoader
    preamble("pl-meta", 2)
    model = _pl_module()
    with torch.device("meta"):
        # a head built under a meta init context
        model.lin[2] = torch.nn.Linear(32, 1)
    L.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False).fit(
        model, DataLoader(_DS(), batch_size=16))


# ---------------------------------------------------------------- Hugging Face

def _tiny_bert(save_to: str | None = None):
    from transformers import BertConfig, BertForSequenceClassification
    cfg = BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64, num_labels=2)
    m = BertForSequenceClassification(cfg)
    if save_to:
        m.save_pretrained(save_to)
    return m


class _TokDS:
    def __init__(self, n=64, labels=True):
        import torch
        g = torch.Generator().manual_seed(3)
        self.ids = torch.randint(0, 200, (n, 16), generator=g)
        self.lab = torch.randint(0, 2, (n,), generator=g)
        self.labels = labels

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        item = {"input_ids": self.ids[i], "attention_mask": self.ids[i] * 0 + 1}
        if self.labels:
            item["labels"] = self.lab[i]
        die = os.environ.get("DIE")
        if die and i == 20:
            if die == "segv":
                ctypes.string_at(0)
            os.kill(os.getpid(), signal.SIGKILL)
        return item


def _trainer(out: str, **kw):
    from transformers import Trainer, TrainingArguments
    args = dict(output_dir=out, per_device_train_batch_size=8, num_train_epochs=2,
                logging_steps=2, report_to=[], save_strategy="no", use_cpu=True,
                disable_tqdm=False)
    args.update(kw)
    return Trainer(model=_tiny_bert(), args=TrainingArguments(**args),
                   train_dataset=_TokDS(labels=os.environ.get("NOLABELS") is None))


def hf_ok() -> None:
    preamble("hf-ok", 2)
    t = _trainer(ARG or "/tmp/hf-ok")
    t.train()
    print("train done", flush=True)


def hf_nolabels() -> None:
    os.environ["NOLABELS"] = "1"
    preamble("hf-nolabels", 2)
    _trainer(ARG or "/tmp/hf-nl").train()


def hf_nan() -> None:
    """A user script's own NaN guard: stop when the logged loss is nan, exit 0."""
    import math

    from transformers import TrainerCallback
    preamble("hf-nan", 2)

    class Guard(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            # the Trainer filters nan losses from its logs; the grad norm shows them
            for key in ("loss", "grad_norm"):
                if logs and key in logs and not math.isfinite(float(logs[key])):
                    print(f"{key} is {logs[key]} at step {state.global_step}, stopping training.",
                          flush=True)
                    control.should_training_stop = True

    t = _trainer(ARG or "/tmp/hf-nan", learning_rate=1e18, num_train_epochs=20,
                 max_grad_norm=0.0, optim="sgd")
    t.add_callback(Guard())
    t.train()
    print("exiting", flush=True)


def hf_fp16() -> None:
    preamble("hf-fp16", 2)
    _trainer(ARG or "/tmp/hf-fp16", use_cpu=False, fp16=True).train()


def hf_workers() -> None:
    preamble("hf-workers", 2)
    _trainer(ARG or "/tmp/hf-w", dataloader_num_workers=2).train()


def hf_missing() -> None:
    from transformers import AutoModelForCausalLM
    preamble("hf-load", 2)
    AutoModelForCausalLM.from_pretrained(ARG or "/scratch/ckpts/llama-3-8b-sft/checkpoint-1200")


def hf_load() -> None:
    from transformers import AutoModelForSequenceClassification
    preamble("hf-load", 2)
    m = AutoModelForSequenceClassification.from_pretrained(ARG)
    print(type(m).__name__, flush=True)


def hf_make() -> None:
    _tiny_bert(ARG)


def hf_save() -> None:
    preamble("hf-save", 2)
    m = _tiny_bert()
    from transformers import BertConfig, BertForSequenceClassification
    big = BertForSequenceClassification(BertConfig(
        vocab_size=3000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=256))
    del m
    big.save_pretrained(ARG)
    print("saved", flush=True)


def hf_import() -> None:
    preamble("hf-import", 2)
    # (transformers has no such class)
    from transformers import LlamaFlashForCausalLM  # noqa: F401


def hf_hub() -> None:
    from huggingface_hub import hf_hub_download
    preamble("hf-hub", 2)
    p = hf_hub_download("acme-research/tiny-lm", "config.json", revision="main")
    print(p)


# ---------------------------------------------------------------- Ray, submitit, DeepSpeed

def _ray():
    import ray
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=80 * 1024 * 1024)
    return ray


def ray_task_error() -> None:
    preamble("ray-prep", 2)
    ray = _ray()

    @ray.remote
    def shard(i):
        table = {"train": 1, "valid": 2}
        return table["test" if i == 3 else "train"]
    print(ray.get([shard.remote(i) for i in range(5)]))


def ray_segv() -> None:
    preamble("ray-decode", 2)
    ray = _ray()

    @ray.remote(max_retries=0)
    def decode(i):
        if i == 2:
            ctypes.string_at(0)
        return i
    print(ray.get([decode.remote(i) for i in range(4)]))


def ray_ok() -> None:
    preamble("ray-ok", 2)
    ray = _ray()

    @ray.remote(max_retries=2, retry_exceptions=True)
    def flaky(i):
        marker = f"/tmp/ray-flaky-{os.getppid()}-{i}"
        if i == 1 and not os.path.exists(marker):
            open(marker, "w").close()
            raise ConnectionError("transient")
        return i * i
    print("results", ray.get([flaky.remote(i) for i in range(4)]), flush=True)
    ray.shutdown()


def submitit_exc() -> None:
    import submitit
    preamble("submitit", 2)

    def job(n):
        data = list(range(n))
        return sum(data) / (len(data) - n)
    ex = submitit.AutoExecutor(folder=ARG or "/tmp/submitit-logs", cluster="local")
    ex.update_parameters(timeout_min=2)
    j = ex.submit(job, 10)
    print("submitted", j.job_id, flush=True)
    print(j.result())


def ds_import() -> None:
    preamble("ds", 2)
    import deepspeed
    import torch
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    p = [torch.nn.Parameter(torch.randn(4, 4))]
    print(deepspeed.__version__, DeepSpeedCPUAdam(p))


# ---------------------------------------------------------------- torch, plain Python

def torch_warn() -> None:
    """Run under -W error: a deprecation warning becomes the failure."""
    import torch
    preamble("warn", 3)
    logits = torch.randn(4, 10)
    print(torch.nn.functional.softmax(logits).sum())


def torch_cuda() -> None:
    import torch
    preamble("cuda", 2)
    model = torch.nn.Linear(8, 8).cuda()
    print(model)


def torch_nan_exit0() -> None:
    """Silent failure: the loss goes nan, the script's guard breaks out, exit status 0."""
    import math

    import torch
    preamble("nan0", 2)
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(m.parameters(), lr=float(ARG or 0.5))
    x, y = torch.randn(256, 16) * 20, torch.randn(256, 1) * 500
    bad = 0
    for step in range(400):
        loss = torch.nn.functional.mse_loss(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step:4d} | loss = {loss.item():.6g}", flush=True)
        if math.isnan(loss.item()):
            bad += 1
            if bad >= 3:
                print("NaN detected in loss for 3 consecutive steps, aborting.", flush=True)
                break
    sys.exit(0)


def eio() -> None:
    preamble("shard-reader", 3)
    path = ARG or "/proc/self/mem"
    with open(path, "rb") as f:
        for i in range(4):
            chunk = f.read(1 << 20)
            log.info("read chunk %d (%d bytes)", i, len(chunk))


def http_stall() -> None:
    """Fetch shards from a local object-store endpoint that accepts and never answers."""
    import socket
    import threading

    import requests
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    held = []
    threading.Thread(target=lambda: [held.append(srv.accept()) for _ in range(8)],
                     daemon=True).start()
    preamble("fetch", 2)
    for i in range(3):
        url = f"http://127.0.0.1:{port}/bucket/shards/part-{i:05d}.parquet"
        r = requests.get(url, timeout=(3, float(ARG or 4)))
        log.info("got %s", len(r.content))


def hang_lock() -> None:
    import threading
    preamble("hang", 5)
    lk = threading.Lock()
    lk.acquire()
    log.info("waiting for prefetch thread")
    lk.acquire()


def exit_quiet() -> None:
    preamble("quiet", 6)
    log.info("epoch 1 done")
    sys.exit(int(ARG or 1))


def sleep_forever() -> None:
    preamble("long", 5)
    for i in range(100000):
        print(f"iter {i} loss {1 / (i + 1):.5f}", flush=True)
        time.sleep(0.5)


if __name__ == "__main__":
    globals()[sys.argv[1]]()
