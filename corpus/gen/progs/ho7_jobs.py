"""Held-out set 7's jobs: `ho7_jobs.py MODE [ARG ...]`, each failing (or not) by itself.

A realistic mix, not chosen for novelty: the training jobs an ML team runs on a Slurm cluster
(PyTorch DDP under torchrun, DataLoader workers, checkpoint save/resume, Hugging Face
transformers/tokenizers/hub, Lightning, Keras/TF, JAX, safetensors) failing the way they fail
in everyday use. Extra packages (datasets, filelock) come from /opt/gpualert-ho6/site-packages,
appended to sys.path so the corpus venv's own packages win.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.append("/opt/gpualert-ho6/site-packages")
ARGS = sys.argv[2:]


def say(*a: object) -> None:
    print(*a, flush=True)


def arg(i: int, default: str = "") -> str:
    return ARGS[i] if len(ARGS) > i else default


def _rank() -> int:
    return int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", 0)))


def _mlp(d_in: int = 32, d_out: int = 4):
    import torch.nn as nn
    return nn.Sequential(nn.Linear(d_in, 64), nn.ReLU(), nn.Linear(64, d_out))


# ---------------------------------------------------------------- python_exception

def trainer_args() -> None:
    """HF TrainingArguments: keep the best model, but evaluation was switched off."""
    from transformers import TrainingArguments
    say("sft: building TrainingArguments (lora r=16, bf16=False on this node)")
    args = TrainingArguments(output_dir=arg(0, "out"), per_device_train_batch_size=8,
                             eval_strategy="no", save_strategy="steps", save_steps=500,
                             load_best_model_at_end=True, metric_for_best_model="eval_loss",
                             report_to=[])
    say(args.output_dir)


def ddp_unused() -> None:
    """DDP over gloo: an auxiliary head used only on some steps, find_unused_parameters off."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.backbone = nn.Linear(16, 32)
            self.cls_head = nn.Linear(32, 4)
            self.depth_head = nn.Linear(32, 1)

        def forward(self, x, with_depth: bool = False):
            h = torch.relu(self.backbone(x))
            out = self.cls_head(h)
            return out + self.depth_head(h).mean() if with_depth else out

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(Net())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(5):
        x = torch.randn(8, 16)
        loss = model(x, with_depth=(step == 0)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        say(f"[rank {rank}] step {step} loss {loss.item():.4f}")
    dist.destroy_process_group()


def shape_mismatch() -> None:
    """A CNN whose classifier was sized for 32x32 crops, fed the new 64x64 pipeline."""
    import torch
    import torch.nn as nn
    size = int(arg(0, "64"))
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(64 * 8 * 8, 10))
    say(f"config: image_size={size} batch_size=16 classes=10")
    say(f"params: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
    for step in range(3):
        x = torch.randn(16, 3, size, size)
        loss = model(x).logsumexp(1).mean()
        loss.backward()
        say(f"step {step} loss {loss.item():.4f}")


def sd_make() -> None:
    """Save a checkpoint the way a DDP run does when it forgets to unwrap `.module`."""
    import torch
    m = _mlp()
    torch.save({"epoch": 12, "model": {f"module.{k}": v for k, v in m.state_dict().items()},
                "best_acc": 0.734}, arg(0))


def sd_load() -> None:
    import torch
    say(f"=> loading checkpoint '{arg(0)}'")
    ck = torch.load(arg(0), map_location="cpu")
    say(f"=> checkpoint from epoch {ck['epoch']} (best acc {ck['best_acc']})")
    model = _mlp()
    model.load_state_dict(ck["model"])
    say("resumed")


def _lit_module(bad: str = ""):
    import lightning as L
    import torch
    import torch.nn.functional as F

    class LitClassifier(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = _mlp()

        def training_step(self, batch, i):
            x, y = batch
            loss = F.cross_entropy(self.net(x), y)
            if bad == "nan" and self.current_epoch >= 1:
                loss = loss * float("nan")
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch, i):
            x, y = batch
            loss = F.cross_entropy(self.net(x), y)
            if bad == "nan" and self.current_epoch >= 1:
                loss = loss * float("nan")
            self.log("val_loss", loss, prog_bar=True)

        def on_validation_epoch_end(self) -> None:
            m = self.trainer.callback_metrics
            say(f"epoch {self.current_epoch}: " + ", ".join(
                f"{k}={float(v):.4f}" for k, v in sorted(m.items())))

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)
    return LitClassifier()


def _loader(n: int = 256, bs: int = 16, workers: int = 0):
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(n, 32, generator=g), torch.randint(0, 4, (n,), generator=g))
    return DataLoader(ds, batch_size=bs, num_workers=workers)


def lit_valcheck() -> None:
    """Lightning: val_check_interval copied from the big-data config onto a small dataset."""
    import lightning as L
    trainer = L.Trainer(max_epochs=2, val_check_interval=500, accelerator="cpu",
                        default_root_dir=arg(0, "."), enable_progress_bar=False)
    trainer.fit(_lit_module(), _loader(), _loader(64))


def _word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    words = ["the", "a", "of", "to", "and", "in", "is", "was", "for", "on", "with", "as", "by",
             "at", "from", "it", "that", "this", "be", "are"]
    vocab = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2}
    vocab.update({w: i + 3 for i, w in enumerate(words)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


def tokenizer_pad() -> None:
    """A tokenizer built for a decoder-only model (no pad token) used in a padded collator."""
    from transformers import PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast(tokenizer_object=_word_tokenizer(), unk_token="[UNK]")
    say(f"tokenizer: vocab {tok.vocab_size}, pad token {tok.pad_token!r}")
    texts = ["the model is trained on it", "a", "this is from the data that was in it"]
    batch = tok(texts, padding="longest", truncation=True, max_length=32, return_tensors="pt")
    say(batch["input_ids"].shape)


def keras_labels() -> None:
    """Keras: one-hot labels with a sparse loss (the data pipeline changed the label format)."""
    import keras
    import numpy as np
    x = np.random.rand(512, 20).astype("float32")
    y = keras.utils.to_categorical(np.random.randint(0, 5, 512), 5)
    model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(5, activation="softmax")])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, epochs=2, batch_size=32, verbose=2)


class _VarLen:
    """Token sequences of different lengths (no padding collate_fn)."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int):
        import torch
        return torch.randint(0, 1000, (16 + (i * 7) % 23,))


def collate_stack() -> None:
    from torch.utils.data import DataLoader
    dl = DataLoader(_VarLen(), batch_size=8, num_workers=2, shuffle=False)
    for step, batch in enumerate(dl):
        say(f"step {step} batch {tuple(batch.shape)}")


def jax_tracer() -> None:
    """JAX: a Python `if` on a traced loss inside jit (loss clipping written the eager way)."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def step(w, x, y):
        loss = jnp.mean((x @ w - y) ** 2)
        if loss > 100.0:
            loss = loss / 100.0
        return loss

    key = jax.random.PRNGKey(0)
    w = jax.random.normal(key, (8, 1))
    x = jax.random.normal(key, (32, 8))
    say(f"devices: {jax.devices()}")
    say(f"loss {step(w, x, jnp.zeros((32, 1)))}")


def embedding_index() -> None:
    """Special tokens added to the tokenizer, resize_token_embeddings forgotten (CPU run)."""
    import torch
    import torch.nn as nn
    vocab, added = 32000, 3
    emb = nn.Embedding(vocab, 256)
    say(f"added {added} special tokens: <|im_start|>, <|im_end|>, <pad>; vocab now {vocab + added}")
    for step in range(4):
        ids = torch.randint(0, vocab, (4, 128))
        if step == 2:
            ids[1, 0] = vocab + 1  # the first chat-formatted sample
        out = emb(ids)
        say(f"step {step} hidden {tuple(out.shape)} mean {out.mean().item():.4f}")


def rank_keyerror() -> None:
    """torchrun rank: each rank maps its shard's labels; rank ARG0's shard has an unseen class."""
    rank = _rank()
    label_map = {"cat": 0, "dog": 1, "bird": 2, "horse": 3}
    rows = ["cat", "dog", "bird"] * 20 + (["zebra"] if rank == int(arg(0)) else [])
    say(f"[rank {rank}] shard {rank:05d}: {len(rows)} rows")
    time.sleep(1 + rank * 0.2)
    ids = [label_map[r] for r in rows]
    for step in range(30):
        say(f"[rank {rank}] step {step} n={len(ids)}")
        time.sleep(1)


# ---------------------------------------------------------------- file_not_found

def hf_local_ckpt() -> None:
    from transformers import AutoModelForCausalLM
    path = arg(0)
    say(f"loading fine-tuned weights from {path}")
    model = AutoModelForCausalLM.from_pretrained(path)
    say(model.config)


def resume_missing() -> None:
    import torch
    path = arg(0)
    say(f"resume requested: {path}")
    state = torch.load(path, map_location="cpu", weights_only=True)
    say(list(state))


def lit_ckpt_missing() -> None:
    import lightning as L
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", default_root_dir=arg(1, "."),
                        enable_progress_bar=False)
    trainer.fit(_lit_module(), _loader(), _loader(64), ckpt_path=arg(0))


class _Manifest:
    """Image-ish samples listed in a manifest; the files are read by the workers."""

    def __init__(self, manifest: str) -> None:
        with open(manifest) as f:
            self.paths = [ln.strip() for ln in f if ln.strip()]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        import torch
        with open(self.paths[i], "rb") as f:
            raw = f.read()
        return torch.tensor(list(raw[:64]), dtype=torch.float32)


def manifest_make() -> None:
    d = arg(0)
    os.makedirs(f"{d}/imgs", exist_ok=True)
    with open(f"{d}/train.txt", "w") as m:
        for i in range(200):
            p = f"{d}/imgs/{i:06d}.jpg"
            if i != 77:  # removed by the dedup pass, still in the manifest
                with open(p, "wb") as f:
                    f.write(os.urandom(100))
            m.write(p + "\n")


def manifest_train() -> None:
    from torch.utils.data import DataLoader
    dl = DataLoader(_Manifest(arg(0)), batch_size=8, num_workers=2)
    for step, x in enumerate(dl):
        if step % 2 == 0:
            say(f"step {step} batch {tuple(x.shape)} mean {x.mean():.2f}")


# ---------------------------------------------------------------- import_error

def flash_attn() -> None:
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig
    cfg = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4)
    say("building model with attn_implementation=flash_attention_2, dtype bfloat16")
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="flash_attention_2",
                                             dtype=torch.bfloat16)
    say(model.to(torch.bfloat16))


def custom_op() -> None:
    """A fused-op extension built against another torch, loaded at import."""
    import importlib.util

    import torch
    say(f"torch {torch.__version__}; loading fused_adam extension from {arg(0)}")
    spec = importlib.util.spec_from_file_location("fused_adam_cuda", arg(0))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)


# ---------------------------------------------------------------- permission / disk

def save_ckpt() -> None:
    """Save a checkpoint every N steps into ARG0 (sized by ARG1: hidden width)."""
    import torch
    width = int(arg(1, "256"))
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Linear(width, width))
    opt = torch.optim.AdamW(model.parameters())
    for step in range(1, 5):
        loss = model(torch.randn(4, width)).pow(2).mean()
        loss.backward()
        opt.step()
        say(f"step {step} loss {loss.item():.4f}")
    os.makedirs(arg(0), exist_ok=True)
    path = os.path.join(arg(0), "step_000004.pt")
    say(f"saving checkpoint to {path}")
    torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": 4}, path)
    say("saved")


def save_safetensors() -> None:
    import torch
    from safetensors.torch import save_file
    tensors = {f"layers.{i}.weight": torch.randn(256, 256) for i in range(4)}
    path = arg(0)
    say(f"exporting {len(tensors)} tensors to {path}")
    save_file(tensors, path, metadata={"format": "pt"})
    say("exported")


def tok_save() -> None:
    from transformers import PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast(tokenizer_object=_word_tokenizer(), unk_token="[UNK]",
                                  pad_token="[UNK]")
    say(f"saving tokenizer to {arg(0)}")
    tok.save_pretrained(arg(0))


# ---------------------------------------------------------------- host_oom

def cpu_alloc() -> None:
    """Pre-allocate the pinned-style host buffer for the whole token dataset in one tensor."""
    import torch
    n = int(arg(0, "4000000000"))
    say(f"allocating host buffer for {n:,} tokens")
    buf = torch.empty(n, dtype=torch.int64)
    say(buf.shape)


def np_load_all() -> None:
    import numpy as np
    say("loading all 48 feature shards into memory")
    feats = np.zeros((48 * 200000, 4096), dtype=np.float32)
    say(feats.nbytes)


# ---------------------------------------------------------------- segfault

def native_decode() -> None:
    """A fast decoder (ctypes) hitting a sample with no header; faulthandler on."""
    import ctypes
    lib = ctypes.CDLL(arg(0))
    lib.decode_frame.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.decode_frame.restype = ctypes.c_int
    for i in range(40):
        hdr = b"" if i == 23 else b"FRM1"
        n = lib.decode_frame(hdr or None, i)
        if i % 5 == 0:
            say(f"decoded sample {i}: {n} bytes")


def memmap_shrink() -> None:
    """A memory-mapped token file another job rewrites (truncates) while this one reads it."""
    import subprocess

    import numpy as np
    path = arg(0)
    arr = np.memmap(path, dtype=np.uint16, mode="r")
    say(f"mapped {path}: {arr.shape[0]:,} tokens")
    total = 0
    for i in range(0, arr.shape[0], 1 << 18):
        if i == 1 << 20:
            subprocess.run(["truncate", "-s", "4096", path], check=True)
        total += int(arr[i:i + 2048].sum())
        say(f"chunk {i >> 18}: checksum {total}")


# ---------------------------------------------------------------- loops (killed, unknown, Slurm)

def train_loop() -> None:
    """A long CPU training loop printing progress (time limits, cancels, preemption, kills)."""
    import torch
    steps = int(arg(0, "100000"))
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rank = _rank()
    for step in range(steps):
        x = torch.randn(32, 32)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if step % 5 == 0:
            say(f"[rank {rank}] step {step} loss {loss.item():.4f}")
        time.sleep(0.5)
    say(f"[rank {rank}] done")


def eval_gate() -> None:
    """An evaluation job that returns a non-zero status when accuracy is below the gate."""
    acc = 0.0
    for shard in range(6):
        acc = 0.55 + shard * 0.01
        say(f"eval shard {shard}/6 running acc {acc:.3f}")
        time.sleep(0.3)
    say(f"val acc {acc:.3f}")
    sys.exit(int(acc < float(arg(0, "0.7"))))


def rank_grow() -> None:
    """srun task: rank ARG0 caches every decoded video clip (never evicted); the others idle."""
    import numpy as np
    rank = _rank()
    cache = []
    for step in range(400):
        if rank == int(arg(0)):
            cache.append(np.ones(4 << 20))  # 32 MiB a clip
        if step % 5 == 0:
            say(f"[rank {rank}] step {step} cached clips {len(cache)}")
        time.sleep(0.2)
    say(f"[rank {rank}] finished")


def preload() -> None:
    """srun task: rank ARG0 preloads every shard into RAM (the rank-0-only guard was lost)."""
    import numpy as np
    rank = _rank()
    shards = []
    for i in range(400):
        if rank == int(arg(0)):
            shards.append(np.random.bytes(24 << 20))
            say(f"[rank {rank}] loaded shard {i:04d} into memory")
        elif i % 5 == 0:
            say(f"[rank {rank}] waiting for the data broadcast ({i})")
        time.sleep(0.2)


class _Captions:
    """Captions held as a Python list: each worker's reads touch the refcounts, so the forked
    workers copy the pages (the copy-on-read growth of list-backed datasets)."""

    def __init__(self) -> None:
        self.rows = [f"a photo of object {i} on a table, id={i:08d}" for i in range(1_500_000)]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int):
        if i % 64 == 0:
            for j in range(0, len(self.rows), 97):  # the shuffle buffer walks the whole list
                _ = self.rows[j]
        return len(self.rows[i])


def caption_workers() -> None:
    from torch.utils.data import DataLoader
    ds = _Captions()
    say(f"dataset: {len(ds):,} captions; DataLoader num_workers=4")
    dl = DataLoader(ds, batch_size=256, num_workers=4, shuffle=True)
    for step, b in enumerate(dl):
        if step % 20 == 0:
            say(f"step {step} batch {len(b)}")


def rank_segv() -> None:
    """srun task: rank ARG0 decodes a malformed sample with the native decoder."""
    import ctypes
    rank = _rank()
    lib = ctypes.CDLL(arg(1))
    lib.decode_frame.argtypes = [ctypes.c_char_p, ctypes.c_int]
    for i in range(60):
        bad = rank == int(arg(0)) and i == 6
        lib.decode_frame(None if bad else b"FRM1", i)
        say(f"[rank {rank}] sample {i} ok")
        time.sleep(0.5)


def quiet_fail() -> None:
    rank = _rank()
    for step in range(4):
        say(f"[rank {rank}] step {step}")
        time.sleep(0.5)
    if rank == int(arg(0)):
        os._exit(2)
    time.sleep(30)


# ---------------------------------------------------------------- success (some alarming)

def lit_fit_ok() -> None:
    import lightning as L
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", default_root_dir=arg(0, "."),
                        enable_progress_bar=False, log_every_n_steps=5)
    trainer.fit(_lit_module(), _loader(), _loader(64))
    say("fit finished")


def ddp_ok() -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = DDP(_mlp())
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(20):
        loss = model(torch.randn(16, 32)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if step % 5 == 0:
            say(f"[rank {rank}] step {step} loss {loss.item():.4f}")
    dist.barrier()
    say(f"[rank {rank}] training complete")
    dist.destroy_process_group()


def resume_fallback_ok() -> None:
    """Auto-resume: no checkpoint yet is logged with its traceback, then training from scratch."""
    import logging

    import torch
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    log = logging.getLogger("train")
    model = _mlp()
    try:
        model.load_state_dict(torch.load(os.path.join(arg(0), "last.pt"), weights_only=True))
        log.info("resumed from last.pt")
    except FileNotFoundError:
        log.warning("no checkpoint to resume from, starting from scratch", exc_info=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(30):
        loss = model(torch.randn(16, 32)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if step % 10 == 0:
            log.info("step %d loss %.4f", step, loss.item())
    os.makedirs(arg(0), exist_ok=True)
    torch.save(model.state_dict(), os.path.join(arg(0), "last.pt"))
    log.info("saved last.pt; done")


def autobatch_ok() -> None:
    """Find the largest batch that fits (host memory here), halving after an allocation error."""
    import torch
    bs = 1 << 22
    while True:
        try:
            buf = torch.empty(bs, 1024)
            break
        except RuntimeError as e:
            say(f"batch {bs} does not fit: {str(e).splitlines()[0][:160]}")
            bs //= 2
            say(f"retrying with batch {bs}")
    say(f"using batch {bs} ({buf.numel() * 4 / 2**20:.0f} MiB)")
    model = torch.nn.Linear(1024, 8)
    for step in range(5):
        loss = model(torch.randn(64, 1024)).pow(2).mean()
        say(f"step {step} loss {loss.item():.4f}")
    say("done")


def amp_skip_ok() -> None:
    """Dynamic loss scaling: one overflowing step skipped, then normal training."""
    import torch
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scale = 65536.0
    for step in range(40):
        loss = model(torch.randn(16, 32)).pow(2).mean()
        (loss * scale).backward()
        grads = [p.grad for p in model.parameters()]
        if step == 3:
            grads[0][0, 0] = float("inf")
        if not all(torch.isfinite(g).all() for g in grads):
            scale /= 2
            say(f"step {step}: gradient overflow (inf/nan in grads), skipping step; "
                f"loss scale -> {scale:.0f}")
        else:
            for g in grads:
                g /= scale
            opt.step()
        opt.zero_grad()
        if step % 10 == 0:
            say(f"step {step} loss {loss.item():.4f} scale {scale:.0f}")
    say("training finished")


def keras_fit_ok() -> None:
    import keras
    import numpy as np
    x = np.random.rand(512, 20).astype("float32")
    y = np.random.randint(0, 5, 512)
    model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(5, activation="softmax")])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, epochs=3, batch_size=64, validation_split=0.2, verbose=2)
    say("saved model: " + str(model.count_params()) + " params")


# ---------------------------------------------------------------- nan_divergence

def nan_guard() -> None:
    """lr schedule with a 100x warmup bug; the loop aborts on a non-finite loss."""
    import math

    import torch
    torch.manual_seed(0)
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(200):
        for g in opt.param_groups:
            g["lr"] = 0.01 * (100 if step >= 10 else 1) * (step + 1)
        x = torch.randn(32, 32) * 3
        loss = model(x).pow(2).mean()
        if not math.isfinite(loss.item()):
            raise RuntimeError(f"Loss is {loss.item()} at step {step}, stopping training")
        loss.backward()
        opt.step()
        opt.zero_grad()
        say(f"step {step} lr {opt.param_groups[0]['lr']:.2f} loss {loss.item():.4e}")


def nan_exit0() -> None:
    """No guard: the loss goes to nan, the loop runs on and the script exits 0."""
    import torch
    torch.manual_seed(1)
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=5.0)
    for step in range(60):
        x = torch.randn(32, 32) * 4
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if step % 5 == 0:
            say(f"epoch 0 step {step} loss: {loss.item():.4f}")
    say("saving final weights to final.pt")


def lit_nan_stop() -> None:
    """Lightning EarlyStopping(check_finite=True) stops on a NaN val_loss; exit 0."""
    import lightning as L
    from lightning.pytorch.callbacks import EarlyStopping
    trainer = L.Trainer(max_epochs=5, accelerator="cpu", default_root_dir=arg(0, "."),
                        enable_progress_bar=False,
                        callbacks=[EarlyStopping(monitor="val_loss", check_finite=True)])
    trainer.fit(_lit_module("nan"), _loader(), _loader(64))
    say("fit returned")


def keras_nan_stop() -> None:
    """Keras TerminateOnNaN after a too-high learning rate; exit 0."""
    import keras
    import numpy as np
    x = (np.random.rand(512, 20).astype("float32") * 100)
    y = (x.sum(axis=1, keepdims=True) ** 2).astype("float32")
    model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=10.0), loss="mse")
    model.fit(x, y, epochs=5, batch_size=32, verbose=2,
              callbacks=[keras.callbacks.TerminateOnNaN()])
    say("training script finished")


# ---------------------------------------------------------------- dataloader_worker

class _Slow:
    def __init__(self, slow_at: int = -1, native: str = "") -> None:
        self.slow_at, self.native = slow_at, native

    def __len__(self) -> int:
        return 4000

    def __getitem__(self, i: int):
        import torch
        if i == self.slow_at:
            time.sleep(60)  # a read stuck on the shared filesystem
        if self.native and i == 37:
            import ctypes
            lib = ctypes.CDLL(self.native)
            lib.decode_frame.argtypes = [ctypes.c_char_p, ctypes.c_int]
            lib.decode_frame(None, i)
        time.sleep(0.02)
        return torch.randn(32)


def dl_loop() -> None:
    """Train from a DataLoader with workers; ARG0: plain|slow|native (ARG1: the decoder lib)."""
    from torch.utils.data import DataLoader
    how = arg(0, "plain")
    ds = _Slow(slow_at=50 if how == "slow" else -1, native=arg(1) if how == "native" else "")
    dl = DataLoader(ds, batch_size=8, num_workers=2, timeout=10 if how == "slow" else 0)
    for step, x in enumerate(dl):
        if step % 4 == 0:
            say(f"step {step} batch mean {x.mean():.3f}")


# ---------------------------------------------------------------- checkpoint_corrupt

def ckpt_load() -> None:
    import torch
    say(f"resuming from {arg(0)}")
    ck = torch.load(arg(0), map_location="cpu")
    say(sorted(ck)[:3])


def ckpt_make_args() -> None:
    """An older training script's checkpoint: it pickles its argparse namespace."""
    import argparse

    import torch
    ns = argparse.Namespace(lr=3e-4, arch="resnet50", epochs=90)
    torch.save({"args": ns, "model": _mlp().state_dict(), "epoch": 41}, arg(0))


def st_load() -> None:
    from safetensors.torch import load_file
    say(f"loading adapter weights {arg(0)}")
    sd = load_file(arg(0))
    say(len(sd))


# ---------------------------------------------------------------- storage_io

def hub_download() -> None:
    from huggingface_hub import snapshot_download
    say(f"fetching model files from {os.environ.get('HF_ENDPOINT')}")
    path = snapshot_download("acme-ml/tiny-llama-sft", revision="main")
    say(path)


# ---------------------------------------------------------------- collective_timeout / hang

def gloo_straggler() -> None:
    """DDP-style all_reduce of metrics; rank ARG0 is stuck re-indexing its shard."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    for step in range(3):
        t = torch.tensor([float(step)])
        dist.all_reduce(t)
        say(f"[rank {rank}] step {step} synced {t.item()}")
    if rank == int(arg(0)):
        say(f"[rank {rank}] rebuilding shard index (cache miss)")
        time.sleep(120)
    t = torch.tensor([1.0])
    dist.all_reduce(t)
    say(f"[rank {rank}] epoch done")


def store_wait() -> None:
    """Rank 0 of a 2-rank job whose rank 1 never starts (its node is still pulling the image)."""
    from datetime import timedelta

    import torch.distributed as dist
    say(f"init_process_group: rank 0 of 2, master {os.environ['MASTER_ADDR']}:"
        f"{os.environ['MASTER_PORT']}")
    dist.init_process_group("gloo", rank=0, world_size=2, timeout=timedelta(seconds=15))
    say("joined")


def eval_mismatch() -> None:
    """Rank 0 runs an extra evaluation all_reduce the others skip: everyone waits (no timeout)."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", timeout=timedelta(hours=2))
    rank = dist.get_rank()
    for step in range(1, 7):
        t = torch.tensor([float(step)])
        dist.all_reduce(t)
        say(f"[rank {rank}] step {step} loss-sync {t.item()}")
        if step == 5 and rank == 0:
            say("[rank 0] running validation")
            dist.all_reduce(torch.tensor([0.5]))
        if step == 5 and rank != 0:
            dist.barrier()
    say(f"[rank {rank}] done")


def cache_lock() -> None:
    """A cache build guarded by a file lock a crashed job left held (via a stale process)."""
    from filelock import FileLock
    path = arg(0)
    say(f"preparing tokenized cache, waiting for lock {path}")
    with FileLock(path):
        say("lock acquired")


# ---------------------------------------------------------------- cuda_setup / device

def cuda_cpu_wheel() -> None:
    import torch
    say(f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}")
    model = _mlp()
    model = model.cuda()
    say(model)


def lit_gpu() -> None:
    import lightning as L
    trainer = L.Trainer(accelerator="gpu", devices=4, strategy="ddp", max_epochs=1,
                        default_root_dir=arg(0, "."))
    trainer.fit(_lit_module(), _loader())


def jax_gpu() -> None:
    import jax
    say(f"jax {jax.__version__}")
    gpus = jax.devices("gpu")
    say(gpus)


def meta_init() -> None:
    """Model built on the meta device (to save memory), the weights never materialised."""
    import torch
    with torch.device("meta"):
        model = _mlp()
    say("model initialised on meta device; loading adapter only")
    x = torch.randn(4, 32)
    say(model(x))


MODES = {k: v for k, v in globals().items() if callable(v) and not k.startswith("_")
         and k not in ("say", "arg", "annotations")}

if __name__ == "__main__":
    MODES[sys.argv[1]]()
