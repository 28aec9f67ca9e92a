"""Held-out set 8's Python jobs: `ho8_jobs.py MODE [ARG ...]`, each failing (or not) by itself.

Libraries the earlier sets did not use: Polars, DuckDB, ONNX + ONNX Runtime, SentencePiece,
FAISS, Optax, PEFT (in /opt/gpualert-ho8/site-packages, pip --target, see
corpus/holdout8/README.md), a ctypes custom-op library, plus torch's DataLoader under a
forkserver context, multiprocessing.Pool and gloo collectives.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.append("/opt/gpualert-ho8/site-packages")
sys.path.append("/opt/gpualert-ho6/site-packages")
ARGS = sys.argv[2:]


def say(*a: object) -> None:
    print(*a, flush=True)


def arg(i: int, default: str = "") -> str:
    return ARGS[i] if len(ARGS) > i else default


def _frame(n: int = 20000):
    import polars as pl
    return pl.DataFrame({"user_id": [i % 997 for i in range(n)],
                         "item": [f"sku-{i % 311}" for i in range(n)],
                         "clicks": [i % 13 for i in range(n)],
                         "dwell_ms": [float(i % 5000) for i in range(n)]})


# ---------------------------------------------------------------- python_exception

def polars_column() -> None:
    import polars as pl
    df = _frame()
    say(f"events: {df.height} rows, columns {df.columns}")
    out = (df.lazy().group_by("user_id")
           .agg(pl.col("clicks").sum(), pl.col("dwell_seconds").mean())
           .collect())
    say(out.head())


def duckdb_binder() -> None:
    import duckdb
    con = duckdb.connect()
    con.execute("CREATE TABLE runs AS SELECT range AS step, random() AS loss FROM range(1000)")
    say("runs table ready:", con.execute("SELECT count(*) FROM runs").fetchone()[0], "rows")
    say(con.execute("SELECT step, avg(val_loss) FROM runs GROUP BY step").fetchall()[:3])


def onnx_make() -> None:
    """A small MLP exported as ONNX (input x: float32 [N, 16])."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 256)).astype("float32"), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((256, 4)).astype("float32"), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       ["N", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
                          [w1, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, arg(0))


def ort_run() -> None:
    """Batch inference with ONNX Runtime: ARG0 model, ARG1 feature count, ARG2 providers."""
    import numpy as np
    import onnxruntime as ort
    feats = int(arg(1, "16"))
    providers = arg(2, "CPUExecutionProvider").split(",")
    say(f"onnxruntime {ort.__version__}, loading {arg(0)} with providers {providers}")
    sess = ort.InferenceSession(arg(0), providers=providers)
    say("session providers:", sess.get_providers())
    for b in range(3):
        x = np.random.default_rng(b).standard_normal((256, feats)).astype("float32")
        y = sess.run(None, {"x": x})[0]
        say(f"batch {b}: out {y.shape}, mean {float(y.mean()):.4f}")
    say("done")


def peft_targets() -> None:
    import torch
    from peft import LoraConfig, get_peft_model

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = torch.nn.Linear(64, 192)
            self.proj = torch.nn.Linear(64, 64)

    model = torch.nn.Sequential(*[Block() for _ in range(4)])
    say(f"base model: {sum(p.numel() for p in model.parameters())} parameters")
    cfg = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"])
    model = get_peft_model(model, cfg)
    model.print_trainable_parameters()


def faiss_dim() -> None:
    import faiss
    import numpy as np
    index = faiss.IndexFlatIP(768)
    say(f"index: {index.d} dims, metric inner product")
    emb = np.random.default_rng(0).standard_normal((4096, 1024)).astype("float32")
    say(f"adding {emb.shape[0]} embeddings of dim {emb.shape[1]}")
    index.add(emb)
    say(index.ntotal)


# ---------------------------------------------------------------- file_not_found / corrupt files

def spm_load() -> None:
    import sentencepiece as spm
    say(f"loading tokenizer {arg(0)}")
    sp = spm.SentencePieceProcessor(model_file=arg(0))
    say(sp.encode("hello world", out_type=str))


def spm_make() -> None:
    import sentencepiece as spm
    text = os.path.join(os.path.dirname(arg(0)), "corpus.txt")
    with open(text, "w") as f:
        for i in range(3000):
            f.write(f"the model {i} trained on shard {i % 17} reached loss {i % 101} today\n")
    spm.SentencePieceTrainer.train(input=text, model_prefix=arg(0)[:-len(".model")],
                                   vocab_size=200, minloglevel=2)


def duckdb_parquet() -> None:
    import duckdb
    say(f"aggregating {arg(0)}")
    say(duckdb.sql(f"SELECT count(*) FROM read_parquet('{arg(0)}')").fetchall())


def duckdb_open() -> None:
    import duckdb
    say(f"opening experiment database {arg(0)}")
    con = duckdb.connect(arg(0))
    con.execute("CREATE TABLE IF NOT EXISTS metrics (step INTEGER, loss DOUBLE)")
    con.execute("INSERT INTO metrics SELECT range, 1.0 / (range + 1) FROM range(1000)")
    say(con.execute("SELECT count(*) FROM metrics").fetchone())


def faiss_make() -> None:
    import faiss
    import numpy as np
    index = faiss.IndexFlatL2(128)
    index.add(np.random.default_rng(0).standard_normal((20000, 128)).astype("float32"))
    faiss.write_index(index, arg(0))


def faiss_read() -> None:
    import faiss
    say(f"loading retrieval index {arg(0)}")
    index = faiss.read_index(arg(0))
    say(f"{index.ntotal} vectors")


# ---------------------------------------------------------------- import_error

def peft_removed() -> None:
    import peft
    say(f"peft {peft.__version__}")
    from peft import prepare_model_for_int8_training
    say(prepare_model_for_int8_training)


def op_load() -> None:
    import ctypes
    say(f"loading custom op library {arg(0)}")
    lib = ctypes.CDLL(arg(0))
    say(lib.op_rope)


# ---------------------------------------------------------------- permission / disk full

def polars_write() -> None:
    df = _frame(int(arg(1, "20000")))
    say(f"writing {df.height} rows to {arg(0)}")
    if arg(0).endswith(".csv"):
        df.write_csv(arg(0))
    else:
        df.write_parquet(arg(0), compression="uncompressed")
    say("written")


def duckdb_copy() -> None:
    import duckdb
    say(f"exporting features to {arg(0)}")
    duckdb.sql(f"COPY (SELECT range AS id, md5(range::VARCHAR) AS h, random() AS x FROM "
               f"range({arg(1, '2000000')})) TO '{arg(0)}' (FORMAT csv)")
    say("exported")


def duckdb_copy_logged() -> None:
    """The export error is logged and the script goes on to exit 0."""
    import logging
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        level=logging.INFO)
    log = logging.getLogger("export")
    try:
        duckdb_copy()
    except Exception:
        log.exception("feature export failed")
        log.error("ERROR export incomplete, giving up")


# ---------------------------------------------------------------- host_oom

def duckdb_mem() -> None:
    import duckdb
    con = duckdb.connect()
    con.execute("SET memory_limit = '64MB'")
    con.execute("SET preserve_insertion_order = false")
    con.execute("SET temp_directory = ''")
    say("memory_limit 64MB; building the pair table")
    say(con.execute("SELECT list(md5(range::VARCHAR)) FROM range(4000000) GROUP BY range % 3")
        .fetchall()[0][0][:2])


def faiss_big() -> None:
    import faiss
    import numpy as np
    x = np.random.default_rng(0).standard_normal((50_000, 768)).astype("float32")
    index = faiss.IndexFlatL2(768)
    say("indexing 40 chunks of 50000 x 768 passage embeddings")
    for i in range(40):
        index.add(x)
        say(f"chunk {i}: {index.ntotal} vectors")


def polars_big() -> None:
    import polars as pl
    df = _frame(int(arg(0, "30000")))
    say(f"cross-joining {df.height} users with {df.height} items")
    out = df.join(df.select("item"), how="cross")
    say(out.select(pl.len()))


# ---------------------------------------------------------------- nan_divergence

def optax_fit(guard: bool) -> None:
    import jax
    import jax.numpy as jnp
    import optax
    k = jax.random.PRNGKey(0)
    x = jax.random.normal(k, (512, 8)) * 40.0
    y = x @ jnp.arange(8.0) + 1.0
    params = {"w": jnp.zeros(8), "b": jnp.zeros(())}
    opt = optax.sgd(learning_rate=0.05, momentum=0.9)
    state = opt.init(params)

    def loss_fn(p):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    @jax.jit
    def step(p, s):
        loss, g = jax.value_and_grad(loss_fn)(p)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, loss

    for i in range(60):
        params, state, loss = step(params, state)
        if i % 5 == 0:
            say(f"step {i:3d} loss {float(loss):.6g}")
        if guard and not jnp.isfinite(loss):
            raise FloatingPointError(f"non-finite loss {float(loss)} at step {i}")
    say("saving params to params.npz")


def sgd_overflow() -> None:
    import numpy as np
    from sklearn.linear_model import SGDRegressor
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5000, 20)) * 1e3
    y = x @ rng.standard_normal(20)
    say("fitting SGDRegressor on 5000 unscaled rows")
    m = SGDRegressor(eta0=0.5, learning_rate="constant", max_iter=50)
    m.fit(x, y)
    say(m.score(x, y))


# ---------------------------------------------------------------- dataloader_worker

class _Shards:
    """Token shards; item 700 is where the worker dies (how: segv, ill, abrt, exit)."""

    def __init__(self, how: str) -> None:
        self.how = how

    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int):
        import signal

        import torch
        if i == 700:
            time.sleep(0.5)
            if self.how == "exit":
                os._exit(3)
            os.kill(os.getpid(), {"segv": signal.SIGSEGV, "ill": signal.SIGILL,
                                  "abrt": signal.SIGABRT}[self.how])
        return torch.full((32,), float(i))


def dl_worker() -> None:
    from torch.utils.data import DataLoader
    loader = DataLoader(_Shards(arg(0, "segv")), batch_size=64, num_workers=2,
                        multiprocessing_context=arg(1, "fork"))
    for i, b in enumerate(loader):
        if i % 3 == 0:
            say(f"batch {i} mean {float(b.mean()):.1f}")
    say("epoch done")


# ---------------------------------------------------------------- collective_timeout (torchrun)

def gather_timeout() -> None:
    import datetime

    import torch.distributed as dist
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    r = dist.get_rank()
    say(f"rank {r}: building eval shard index")
    if r == int(arg(0, "1")):
        time.sleep(120)  # a rank stuck rebuilding its index
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, {"rank": r, "n": 1000})
    say(out)


# ---------------------------------------------------------------- hang

def _work(i: int) -> int:
    if i == 5:
        os.kill(os.getpid(), 9)  # the kernel (or an admin) kills this worker
    time.sleep(0.2)
    return i * i


def pool_lost() -> None:
    import multiprocessing as mp
    say("featurizing 64 chunks with 4 processes")
    with mp.get_context("fork").Pool(4) as pool:
        res = pool.map(_work, range(64))
    say(sum(res))


# ---------------------------------------------------------------- success

def ok_polars() -> None:
    import polars as pl
    df = _frame()
    say(df.lazy().group_by("item").agg(pl.col("clicks").sum().alias("clicks"),
                                       (pl.col("dwell_ms") / 1000).mean().alias("dwell_s"))
        .sort("clicks", descending=True).collect().head(3))
    say("rows with errors: 0, failed shards: 0")
    say("done")


def ok_faiss() -> None:
    import faiss
    import numpy as np
    x = np.random.default_rng(0).standard_normal((5000, 64)).astype("float32")
    q = faiss.IndexFlatL2(64)
    ivf = faiss.IndexIVFFlat(q, 64, 16)
    ivf.train(x)
    ivf.add(x)
    d, i = ivf.search(x[:5], 3)
    say(f"recall@1 on 5 queries: {float((i[:, 0] == np.arange(5)).mean()):.2f}")
    say("done")


# ---------------------------------------------------------------- multi-rank helpers

def _rank() -> int:
    return int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))


def slow_loop() -> None:
    say(f"rank {_rank()}: scoring shards")
    for i in range(400):
        time.sleep(2)
        say(f"rank {_rank()}: shard {i} scored, {1000 * (i + 1)} rows")


def rank_job() -> None:
    """ARG0: the bad rank, ARG1: the mode it runs (ARG2.. its arguments); the others score."""
    if _rank() != int(arg(0)):
        slow_loop()
        return
    time.sleep(3)
    mode = arg(1)
    del ARGS[:2]
    MODES[mode]()


MODES = {n: f for n, f in globals().items() if callable(f) and not n.startswith("_")
         and f.__module__ == "__main__" and n not in ("say", "arg", "optax_fit")}
MODES["optax_guard"] = lambda: optax_fit(True)
MODES["optax_exit0"] = lambda: optax_fit(False)

if __name__ == "__main__":
    MODES[sys.argv[1]]()
