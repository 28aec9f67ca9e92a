"""Framework failures for the tuning corpus (the kinds held-out set 3 showed, run other ways):
`frameworks.py MODE [ARG]`, run in /opt/gpualert-corpus-venv.

checkpoints (ARG: a scratch dir): tf_data_cut, tf_index_garbage, keras_h5_cut, keras_lfs,
  h5_html; JAX coordination (ARG: port): jax_worker_nocoord, jax_join (RANK, WORLD_SIZE from the
  environment; the last process never starts); meta tensors: meta_to, meta_copy,
  meta_item, meta_numpy, meta_tolist; Hugging Face paths that do not exist: hf_tok_missing,
  hf_rel_missing, hf_pipe_missing, hf_dot_missing, hf_offline_notcached; the hub unreachable
  (HF_ENDPOINT set by the case): hf_hub_get, hf_snapshot, hf_from_pretrained; safetensors
  writes (ARG: dir): st_torch_save, st_numpy_save; XLA on the CPU (ARG: n): jax_outer,
  jax_zeros, jax_normal; a plain training loop (for torchrun, killed from outside):
  train_loop; grad norms on exit 0: gradnorm_guard, gradnorm_dict, gradnorm_ok,
  gradnorm_early_skip.
"""

from __future__ import annotations

import os
import sys
import time

MODE = sys.argv[1]
ARG = sys.argv[2] if len(sys.argv) > 2 else ""


def banner(job: str, iters: int = 3) -> None:
    """A few lines of ordinary progress before the failure, in a fairseq-like format."""
    print(f"| job {job} | pid {os.getpid()} | host {os.uname().nodename}", flush=True)
    for i in range(iters):
        print(f"| epoch 000 | iter {20 * (i + 1):4d}/400 | loss {2.5 - 0.2 * i:.3f} "
              f"| wps {1800 + 37 * i}", flush=True)


# ---------------------------------------------------------------- checkpoints

def _tf_ckpt(d: str):
    import tensorflow as tf
    ck = tf.train.Checkpoint(emb=tf.Variable(tf.random.normal([512, 64])),
                             head=tf.Variable(tf.zeros([64, 10])),
                             step=tf.Variable(1200, dtype=tf.int64))
    return tf, ck.write(os.path.join(d, "ckpt-1200"))


def tf_data_cut() -> None:
    banner("tf-eval-from-ckpt")
    tf, prefix = _tf_ckpt(ARG)
    data = prefix + ".data-00000-of-00001"
    with open(data, "r+b") as f:  # a copy that stopped half-way
        f.truncate(os.path.getsize(data) // 3)
    reader = tf.train.load_checkpoint(prefix)
    for name in sorted(reader.get_variable_to_shape_map()):
        print("restoring", name, reader.get_tensor(name).shape, flush=True)


def tf_index_garbage() -> None:
    banner("tf-finetune")
    tf, prefix = _tf_ckpt(ARG)
    with open(prefix + ".index", "wb") as f:  # overwritten by another job's log output
        f.write(b"2026-03-02 11:02:17 INFO step 1200 loss 0.41\n" * 20)
    print(tf.train.list_variables(prefix))


def _keras_net():
    import keras
    net = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                            keras.layers.Dense(3)])
    net.compile(optimizer="adam", loss="mse")
    return keras, net


def keras_h5_cut() -> None:
    banner("keras-resume")
    keras, net = _keras_net()
    path = os.path.join(ARG, "epoch_07.weights.h5")
    net.save_weights(path)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) * 2 // 5)
    print("loading", path, flush=True)
    net.load_weights(path)


def keras_lfs() -> None:
    banner("keras-serve")
    import keras
    path = os.path.join(ARG, "classifier.keras")
    with open(path, "w") as f:  # a clone without git-lfs: the pointer, not the model
        f.write("version https://git-lfs.github.com/spec/v1\noid sha256:"
                "4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
                "size 48213344\n")
    print("loading", path, flush=True)
    keras.models.load_model(path)


def h5_html() -> None:
    banner("keras-transfer")
    keras, net = _keras_net()
    path = os.path.join(ARG, "backbone.weights.h5")
    with open(path, "w") as f:  # a download that got the login page instead
        f.write("<!DOCTYPE html><html><head><title>Sign in</title></head><body>"
                "Please sign in to continue.</body></html>\n")
    print("loading pretrained", path, flush=True)
    net.load_weights(path)


# ---------------------------------------------------------------- JAX coordination

def jax_worker_nocoord() -> None:
    import jax
    banner("jax-pod-worker", 2)
    print(f"connecting to coordinator 127.0.0.1:{ARG} as process 1 of 2", flush=True)
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{ARG}", num_processes=2,
                               process_id=1, initialization_timeout=12)
    print(jax.process_count())


def jax_join() -> None:
    """One process of WORLD_SIZE joining a JAX job whose last process never starts."""
    import jax
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "3"))
    banner(f"jax-multihost-rank{rank}", 2)
    print(f"process {rank} of {world}: joining 127.0.0.1:{ARG}", flush=True)
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{ARG}", num_processes=world,
                               process_id=rank, initialization_timeout=15,
                               shutdown_timeout_seconds=5)
    print(jax.process_count())


# ---------------------------------------------------------------- meta tensors

def _meta_net():
    import torch
    with torch.device("meta"):  # built for a deferred init that never happened
        return torch, torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                          torch.nn.Linear(32, 4))


def meta_to() -> None:
    banner("meta-init")
    torch, net = _meta_net()
    net.to("cpu")


def meta_copy() -> None:
    banner("meta-ema")
    torch, net = _meta_net()
    ema = torch.nn.Linear(16, 32)
    with torch.no_grad():
        ema.weight.copy_(net[0].weight)


def meta_item() -> None:
    banner("meta-metric")
    torch, net = _meta_net()
    out = net(torch.randn(8, 16, device="meta"))
    print("val loss", out.pow(2).mean().item())


def meta_numpy() -> None:
    banner("meta-export")
    torch, net = _meta_net()
    print(net[2].bias.detach().numpy())


def meta_tolist() -> None:
    banner("meta-log")
    torch, net = _meta_net()
    print("head norms", net[2].weight.norm(dim=1).tolist())


# ---------------------------------------------------------------- Hugging Face paths

def hf_tok_missing() -> None:
    banner("hf-tokenize")
    from transformers import AutoTokenizer
    AutoTokenizer.from_pretrained("/scratch/users/ana/tokenizers/spm-32k")


def hf_rel_missing() -> None:
    banner("hf-eval")
    from transformers import AutoModel
    AutoModel.from_pretrained("./outputs/run3/final")


def hf_pipe_missing() -> None:
    banner("hf-infer")
    from transformers import pipeline
    pipeline("text-classification", model="/data/models/sentiment-v2")


def hf_dot_missing() -> None:
    banner("hf-resume")
    from transformers import AutoConfig
    AutoConfig.from_pretrained("./ckpt")


def hf_offline_notcached() -> None:
    banner("hf-offline")
    from transformers import AutoConfig
    AutoConfig.from_pretrained("outputs/final")


def hf_hub_get() -> None:
    banner("hf-fetch")
    from huggingface_hub import hf_hub_download
    print(hf_hub_download("lab-nlp/tiny-encoder", "tokenizer.json"))


def hf_snapshot() -> None:
    banner("hf-mirror")
    from huggingface_hub import snapshot_download
    print(snapshot_download("lab-nlp/tiny-encoder", revision="v1.2"))


def hf_from_pretrained() -> None:
    banner("hf-load")
    from transformers import AutoConfig
    print(AutoConfig.from_pretrained("lab-nlp/tiny-encoder"))


# ---------------------------------------------------------------- safetensors writes

def st_torch_save() -> None:
    banner("st-export")
    import torch
    from safetensors.torch import save_file
    state = {f"layer{i}.weight": torch.randn(256, 256) for i in range(4)}
    save_file(state, os.path.join(ARG, "model-00001-of-00002.safetensors"))


def st_numpy_save() -> None:
    banner("st-features")
    import numpy as np
    from safetensors.numpy import save_file
    save_file({"features": np.ones((512, 512), dtype=np.float32)},
              os.path.join(ARG, "features.safetensors"))


# ---------------------------------------------------------------- XLA on the CPU

def jax_outer() -> None:
    import jax
    import jax.numpy as jnp
    banner("jax-gram")
    n = int(ARG or 120000)
    x = jnp.ones((n,), dtype=jnp.float32)
    gram = jax.jit(lambda v: jnp.outer(v, v) * 0.5)(x).block_until_ready()
    print(gram.shape)


def jax_zeros() -> None:
    import jax.numpy as jnp
    banner("jax-buffer")
    n = int(ARG or 60000)
    print(jnp.zeros((n, n), dtype=jnp.float32).shape)


def jax_normal() -> None:
    import jax
    banner("jax-init")
    n = int(ARG or 60000)
    w = jax.random.normal(jax.random.key(0), (n, n)).block_until_ready()
    print(w.shape)


# ---------------------------------------------------------------- training loops

def train_loop() -> None:
    rank = os.environ.get("RANK", "0")
    for i in range(10**6):
        if i % 10 == 0:
            print(f"[worker {rank}] iter {i} loss {1.0 / (i + 1):.4f}", flush=True)
        time.sleep(0.1)


def _diverge(report, stop_at_nan: bool = True, steps: int = 200, lr: float = 5.0) -> None:
    """A real loop: SGD with a far too large rate on unscaled inputs; report(step, loss, gn)."""
    import torch
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    x = torch.randn(256, 8) * 50
    y = x.sum(1, keepdim=True)
    for step in range(steps):
        loss = torch.nn.functional.mse_loss(net(x), y)
        opt.zero_grad()
        loss.backward()
        gn = float(torch.nn.utils.clip_grad_norm_(net.parameters(), float("inf")))
        opt.step()
        if report(step, float(loss), gn) and stop_at_nan:
            return


def gradnorm_guard() -> None:
    """Exit 0 after a user's guard stops on a non-finite grad norm."""
    import math
    banner("gn-guard")

    def report(step: int, loss: float, gn: float) -> bool:
        if step % 10 == 0 and math.isfinite(loss):  # the loss only now and then
            print(f"step {step:4d} loss={loss:.4g}", flush=True)
        print(f"step {step:4d} grad_norm={gn:.4g} lr=5.0", flush=True)
        if not math.isfinite(gn):
            print(f"grad norm is {gn} at step {step}; stopping early", flush=True)
            return True
        return False
    _diverge(report)
    print("wrote final summary to summary.json")


def gradnorm_dict() -> None:
    """Exit 0; a Trainer-like log dict with string values, then the loop ends."""
    import math
    banner("gn-dict")

    def report(step: int, loss: float, gn: float) -> bool:
        # like the HF Trainer's logs: a loss that is not finite is left out, the norm is not
        logs = {"loss": f"{loss:.4g}"} if math.isfinite(loss) else {}
        print(dict(logs, grad_norm=f"{gn:.4g}", epoch=f"{step / 50:.2f}"), flush=True)
        return not math.isfinite(gn)
    _diverge(report)
    print("training finished")


def gradnorm_ok() -> None:
    """Exit 0, finite grad norms logged at every step (benign)."""
    banner("gn-ok")

    def report(step: int, loss: float, gn: float) -> bool:
        print(f"step {step:4d} loss={loss:.4g} grad_norm={gn:.4g} nan_count=0", flush=True)
        return False
    _diverge(report, steps=60, lr=1e-6)
    print("training finished")


def gradnorm_early_skip() -> None:
    """Exit 0: one step's grad norm is inf (an fp16-style overflow, the step skipped), then
    training goes on normally for many steps (benign)."""
    banner("gn-skip")

    def report(step: int, loss: float, gn: float) -> bool:
        if step == 2:
            print(f"step {step:4d} grad_norm: inf, overflow - skipping step, scale 32768 -> "
                  "16384", flush=True)
        else:
            print(f"step {step:4d} loss={loss:.4g} grad_norm={gn:.4g}", flush=True)
        return False
    _diverge(report, steps=90, lr=1e-6)
    print("training finished")


if __name__ == "__main__":
    globals()[MODE]()
