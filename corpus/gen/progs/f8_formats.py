"""Files of query engines, vector indexes, serialized models and archives, run for real on a CPU
after held-out set 8: `f8_formats.py SCENARIO DIR` (tuning-corpus cases f8a-*).

Each scenario does some ordinary work first and then fails by itself, in other calls than
held-out set 8's: ONNX Runtime loading a zero-byte model, a model whose external weights file
is gone, an operator on a type it does not take (each status code its own exception class,
none ending in Error); a script's own exception class and queue.Empty (names no rule knows);
DuckDB opening a database file cut short, FAISS reading half of an HNSW index, SQLite reading
a database cut short, Python's tarfile unpacking a .tar.gz cut short; a Polars scan, a DuckDB
read_csv and tf.data's list_files on globs that match nothing, Hugging Face datasets on an
empty directory; DuckDB under its own memory_limit, Polars under an address-space cap. DuckDB,
FAISS, ONNX, ONNX Runtime and Polars come from /opt/gpualert-ho8/site-packages, datasets from
/opt/gpualert-ho6/site-packages.
"""

from __future__ import annotations

import functools
import os
import resource
import sys

import progkit
from progkit import ARG, say

sys.path.append("/opt/gpualert-ho8/site-packages")
sys.path.append("/opt/gpualert-ho6/site-packages")
steps = functools.partial(progkit.steps, loss=2.3, rate=340, more=11, unit="rows/s")


def _here(d: str, name: str) -> str:
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, name)


def _cut(path: str, keep: float) -> None:
    """Keep the first `keep` share of a file (a copy or a write that stopped)."""
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: int(len(data) * keep)])


def _onnx_mlp(path: str, external: bool = False) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.normal(size=(128, 16)).astype(np.float32), "w")
    vi = helper.make_tensor_value_info
    graph = helper.make_graph([helper.make_node("MatMul", ["features", "w"], ["scores"])], "ranker",
                              [vi("features", TensorProto.FLOAT, [None, 128])],
                              [vi("scores", TensorProto.FLOAT, [None, 16])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save_model(model, path, save_as_external_data=external, all_tensors_to_one_file=True,
                    location=os.path.basename(path) + ".data", size_threshold=0)


def _ort(path: str):
    import onnxruntime as ort
    say(f"onnxruntime {ort.__version__}: loading {path}")
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"])


# ---------------------------------------------------------------- exception names

def ort_zero_byte(d: str) -> None:
    """The model file exists but is empty (a download that wrote nothing)."""
    path = _here(d, "reranker.onnx")
    open(path, "wb").close()
    steps("prepare")
    _ort(path)


def ort_external_missing(d: str) -> None:
    """A model saved with its weights in a side file; the side file was not copied."""
    path = _here(d, "ranker.onnx")
    _onnx_mlp(path, external=True)
    os.remove(path + ".data")
    steps("prepare")
    _ort(path)


def ort_invalid_graph(d: str) -> None:
    """A model exported with an operator on a type it does not take (Sin on int64): ONNX
    Runtime refuses the graph at load (status INVALID_GRAPH, class InvalidGraph)."""
    import onnx
    from onnx import TensorProto, helper
    vi = helper.make_tensor_value_info
    graph = helper.make_graph([helper.make_node("Sin", ["positions"], ["phase"])], "rotary",
                              [vi("positions", TensorProto.INT64, [None, 64])],
                              [vi("phase", TensorProto.INT64, [None, 64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = _here(d, "rotary.onnx")
    onnx.save_model(model, path)
    steps("export")
    _ort(path)


class BadBatch(Exception):  # noqa: N818 - a script's own name, as people write them
    """A check of the script's own, raised uncaught (Python prints `BadBatch: msg`)."""


def own_exception(d: str) -> None:
    steps("train", 4)
    rows = 0
    raise BadBatch(f"batch 17 of {d or 'shard-0003'} has {rows} rows after filtering")


def queue_empty(d: str) -> None:
    """A consumer waits on a queue its producer never filled: `_queue.Empty`, no message."""
    import queue
    import threading
    q: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: None).start()
    steps("consume", 2)
    say("waiting for the next shard from the prefetch thread")
    q.get(timeout=0.5)


# ---------------------------------------------------------------- damaged files

def duckdb_cut(d: str) -> None:
    """A DuckDB database copied while it was being written: its second half is missing."""
    import duckdb
    path = _here(d, "features.duckdb")
    con = duckdb.connect(path)
    con.execute("create table feats as select range as id, random() as score, "
                "repeat('f', 40) as tag from range(400000)")
    con.close()
    _cut(path, 0.35)
    steps("join")
    con = duckdb.connect(path)
    say(con.execute("select avg(score) from feats").fetchall())


def faiss_hnsw_half(d: str) -> None:
    """An HNSW index whose write stopped halfway, read back."""
    import faiss
    import numpy as np
    path = _here(d, "passages.hnsw")
    index = faiss.IndexHNSWFlat(48, 16)
    index.add(np.random.default_rng(2).random((4000, 48), dtype=np.float32))
    faiss.write_index(index, path)
    _cut(path, 0.5)
    steps("encode")
    say(f"reading index {path}")
    faiss.read_index(path)


def sqlite_cut(d: str) -> None:
    """A SQLite label store cut short (rsync interrupted), queried."""
    import sqlite3
    path = _here(d, "labels.sqlite")
    con = sqlite3.connect(path)
    con.execute("create table labels(id integer primary key, text)")
    con.executemany("insert into labels values (?, ?)",
                    ((i, f"label-{i:06d}" * 8) for i in range(30000)))
    con.commit()
    con.close()
    _cut(path, 0.4)
    steps("label")
    con = sqlite3.connect(path)
    say(con.execute("select count(*), max(length(text)) from labels").fetchall())


def tarfile_gz_cut(d: str) -> None:
    """A checkpoint archive (.tar.gz) cut short, unpacked with Python's tarfile."""
    import io
    import tarfile
    path = _here(d, "step_1200.tar.gz")
    with tarfile.open(path, "w:gz") as tar:
        blob = os.urandom(1 << 20)
        for name in ("model.bin", "optimizer.bin"):
            info = tarfile.TarInfo(f"step_1200/{name}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    _cut(path, 0.6)
    steps("restore", 2)
    say(f"unpacking {path}")
    with tarfile.open(path, "r:gz") as tar:
        tar.extractall(_here(d, "restore"))  # noqa: S202 - its own archive


# ---------------------------------------------------------------- globs that match nothing

def polars_glob(d: str) -> None:
    import polars as pl
    steps("load", 2)
    pattern = os.path.join(d, "events", "2026-*", "*.parquet")
    say(f"scanning {pattern}")
    say(pl.scan_parquet(pattern).select(pl.len()).collect())


def duckdb_csv_glob(d: str) -> None:
    import duckdb
    steps("load", 2)
    pattern = os.path.join(d, "clicks", "day=*", "part-*.csv")
    say(duckdb.sql(f"select count(*) from read_csv('{pattern}')").fetchall())


def tf_list_files(d: str) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    steps("input", 2)
    ds = tf.data.Dataset.list_files(os.path.join(d, "train-*.tfrecord"), shuffle=False)
    say(sum(1 for _ in ds))


def hf_empty_dir(d: str) -> None:
    import datasets
    path = _here(d, "corpus_v2")
    os.makedirs(path, exist_ok=True)
    steps("tokenize", 2)
    datasets.load_dataset(path, split="train")


# ---------------------------------------------------------------- memory of query engines

def duckdb_memory_limit(d: str) -> None:
    """A join under DuckDB's own memory_limit (SET memory_limit), spilling disabled."""
    import duckdb
    con = duckdb.connect()
    con.execute("SET memory_limit='48MB'; SET threads=2; SET temp_directory=''")
    steps("aggregate", 3)
    say(con.execute("select k, list(v) from (select i % 7 as k, repeat('v', 60) || i as v "
                    "from range(3000000) t(i)) group by k").fetchall()[0][0])


def polars_capped(d: str) -> None:
    """Polars under an address-space cap (what `ulimit -v` / prlimit --as sets); two threads
    and no jemalloc background thread, so that the cap hits the data, not a thread's stack."""
    os.environ.setdefault("POLARS_MAX_THREADS", "2")
    os.environ.setdefault("_RJEM_MALLOC_CONF", "background_thread:false")
    import polars as pl
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[0])
    cap = pages * resource.getpagesize() + (300 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    steps("explode", 2)
    df = pl.DataFrame({"user": range(2_000_000)})
    say(df.select(pl.col("user").repeat_by(400).explode()).shape)


MODES = {f.__name__: f for f in (
    ort_zero_byte, ort_external_missing, ort_invalid_graph, own_exception, queue_empty,
    duckdb_cut, faiss_hnsw_half, sqlite_cut, tarfile_gz_cut, polars_glob, duckdb_csv_glob,
    tf_list_files, hf_empty_dir, duckdb_memory_limit, polars_capped)}

if __name__ == "__main__":
    MODES[sys.argv[1]](ARG)
