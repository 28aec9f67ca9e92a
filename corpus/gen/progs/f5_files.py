"""File, storage and checkpoint failures of the families held-out set 5 missed, run for real on
a CPU: `f5_files.py SCENARIO [ARG ...]` (tuning-corpus cases f5f-*).

Each scenario does some ordinary work first and then fails by itself: a real local server that
misbehaves (corpus/gen/servers.py, or one started here for answers servers.py does not give),
a real full tmpfs, a real missing or damaged file. Frameworks are imported lazily.
"""

from __future__ import annotations

import os
import socket
import sys
import threading

from progkit import ARG, ARGS, say, steps


def status_server(status: str) -> int:
    """A local HTTP server that answers every request with `status` ("503 Service
    Unavailable", "404 Not Found"), on a thread of this process; returns its port."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)

    def serve() -> None:
        while True:
            c, _ = srv.accept()
            try:
                c.recv(65536)
                body = status.encode()
                c.sendall(b"HTTP/1.1 " + body + b"\r\nContent-Length: " + str(len(body)).encode()
                          + b"\r\nConnection: close\r\n\r\n" + body)
            finally:
                c.close()
    threading.Thread(target=serve, daemon=True).start()
    return srv.getsockname()[1]


# ---------------------------------------------------------------- storage_io

def fsspec_cat_reset() -> None:
    """fsspec's HTTP filesystem reads shards whole (cat_file); the server resets the
    connection."""
    import fsspec
    fs = fsspec.filesystem("http")
    steps("ingest", 2)
    for i in range(3):
        url = f"http://127.0.0.1:{ARG}/webdata/part-{i:05d}.parquet"
        say(f"fetching {url}")
        data = fs.cat_file(url)
        say(f"  {len(data)} bytes")


def aiohttp_stream_cut() -> None:
    """A downloader streams a weights file with aiohttp; the server sends part of the body
    and closes."""
    import asyncio

    import aiohttp

    async def main() -> None:
        url = f"http://127.0.0.1:{ARG}/weights/shard-0003.bin"
        say(f"downloading {url}")
        got = 0
        async with aiohttp.ClientSession() as s, s.get(url) as r:
            async for chunk in r.content.iter_chunked(8192):
                got += len(chunk)
        say(f"done: {got} bytes")
    steps("prefetch", 2)
    asyncio.run(main())


def fsspec_open_503() -> None:
    """fsspec opens a file on an HTTP store that answers 503: it raises FileNotFoundError(url)
    from aiohttp's ClientResponseError."""
    import fsspec
    port = status_server("503 Service Unavailable")
    url = f"http://127.0.0.1:{port}/eval/val-000.jsonl"
    steps("eval-prep", 2)
    say(f"opening {url}")
    with fsspec.open(url, "rt") as f:
        say(f.readline())


def fsspec_open_404() -> None:
    """The same read of a file the server does not have (404): a missing remote file."""
    import fsspec
    port = status_server("404 Not Found")
    url = f"http://127.0.0.1:{port}/eval/val-001.jsonl"
    steps("eval-prep", 2)
    say(f"opening {url}")
    with fsspec.open(url, "rt") as f:
        say(f.readline())


def requests_read_timeout() -> None:
    """A shard reader with a read timeout; the data server accepted and never answered."""
    import requests
    steps("stream", 2)
    url = f"http://127.0.0.1:{ARG}/shards/train-{7:05d}.tar"
    say(f"GET {url} (timeout 3 s)")
    r = requests.get(url, timeout=3)
    say(len(r.content))


def requests_body_cut() -> None:
    """requests downloads a checkpoint whose body the server cuts short."""
    import requests
    url = f"http://127.0.0.1:{ARG}/ckpt/model-00002-of-00004.safetensors"
    say(f"downloading {url}")
    data = requests.get(url, timeout=10).content
    say(f"{len(data)} bytes")


# ---------------------------------------------------------------- disk_full

def ray_save() -> None:
    """A Ray task writes a torch checkpoint to a full filesystem: RayTaskError carries the
    task's traceback and torch's writer error."""
    import ray
    import torch

    @ray.remote
    def write_shard(i: int, path: str) -> str:
        torch.save({"w": torch.randn(256, 256)}, f"{path}/shard-{i}.pt")
        return path

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=True)
    steps("export", 2)
    say(f"writing 4 shards to {ARG} with Ray")
    say(ray.get([write_shard.remote(i, ARG) for i in range(4)]))


def dcp_async_save() -> None:
    """torch.distributed.checkpoint's async_save to a full filesystem; the future's result
    raises CheckpointException with the writer's traceback inside its message."""
    import torch
    import torch.distributed.checkpoint as dcp
    model = torch.nn.Sequential(*[torch.nn.Linear(384, 384) for _ in range(5)])
    steps("finetune", 3)
    say(f"async checkpoint to {ARG}")
    fut = dcp.async_save({"model": model.state_dict()}, checkpoint_id=ARG)
    say("training goes on while the checkpoint is written")
    fut.result()
    say("checkpoint done")


def dcp_load_missing() -> None:
    """torch.distributed.checkpoint.load from a directory that is not there: the
    CheckpointException carries the reader's FileNotFoundError."""
    import torch
    import torch.distributed.checkpoint as dcp
    sd = {"model": torch.nn.Linear(16, 16).state_dict()}
    say(f"resuming from {ARG}")
    dcp.load(sd, checkpoint_id=ARG)


def cache_write_logged() -> None:
    """A feature cache writer that logs a failed write and returns normally (exit 0): nothing
    was cached."""
    import pickle
    steps("featurize", 2)
    path = os.path.join(ARG, "feats.pkl")
    try:
        with open(path, "wb") as f:
            pickle.dump([os.urandom(4096) for _ in range(300)], f)
    except OSError as e:
        say(f"ERROR could not write feature cache {path}: {e}")
    say("featurize finished")


def spill_recovered() -> None:
    """A writer that hits a full scratch dir once, moves to another and goes on for a long
    time (exit 0): a recovered ENOSPC early in a long log."""
    full, spare = ARGS[0], ARGS[1]
    blob = os.urandom(1 << 20)
    try:
        with open(os.path.join(full, "buf.bin"), "wb") as f:
            f.write(blob)
    except OSError as e:
        say(f"warning: scratch write failed ({e}); spilling to {spare} instead")
    with open(os.path.join(spare, "buf.bin"), "wb") as f:
        f.write(blob)
    for s in range(80):
        say(f"epoch 0 step {s:03d}: loss {2.0 / (s + 1) ** 0.5:.4f} spill ok")
    say("training finished: 80 steps")


# ---------------------------------------------------------------- file_not_found

def tf_savedmodel_missing() -> None:
    """A serving export directory that was never written: TensorFlow's own wording."""
    import tensorflow as tf
    steps("serve-warmup", 1)
    say(f"loading SavedModel from {ARG}")
    m = tf.saved_model.load(ARG)
    say(m)


def tf_ckpt_missing() -> None:
    """A checkpoint prefix whose files are not there (the run that wrote it was on another
    filesystem)."""
    import tensorflow as tf
    say(f"reading variables of {ARG}")
    r = tf.train.load_checkpoint(ARG)
    say(sorted(r.get_variable_to_shape_map())[:3])


def hf_no_weights() -> None:
    """A model directory holding only its config (the weights were never copied)."""
    from transformers import AutoModel, BertConfig
    BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
               intermediate_size=37).save_pretrained(ARG)
    say(f"config copied to {ARG}; loading the model")
    m = AutoModel.from_pretrained(ARG)
    say(type(m).__name__)


# ---------------------------------------------------------------- checkpoint_corrupt

def _tokenizer_dir(d: str) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {w: i for i, w in enumerate(["[UNK]", "[PAD]", "the", "cat", "sat", "on", "mat"])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]",
                            pad_token="[PAD]").save_pretrained(d)


def _cut(path: str, keep: float) -> None:
    with open(path, "rb") as f:
        raw = f.read()
    with open(path, "wb") as f:
        f.write(raw[:int(len(raw) * keep)])


def hf_tokenizer_json_cut() -> None:
    """A tokenizer directory whose tokenizer.json was copied half-way (transformers reads it
    with json.load)."""
    from transformers import AutoTokenizer
    _tokenizer_dir(ARG)
    _cut(os.path.join(ARG, "tokenizer.json"), 0.5)
    say(f"loading tokenizer from {ARG}")
    tok = AutoTokenizer.from_pretrained(ARG)
    say(tok("the cat sat"))


def tokenizers_lfs_pointer() -> None:
    """tokenizer.json is a git-lfs pointer (the repository was cloned without lfs): the
    tokenizers library's JSON reader fails on its first byte."""
    from tokenizers import Tokenizer
    path = os.path.join(ARG, "tokenizer.json")
    os.makedirs(ARG, exist_ok=True)
    with open(path, "w") as f:
        f.write("version https://git-lfs.github.com/spec/v1\n"
                "oid sha256:9f2c3b7e41d0a8c5e6f1b2a3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7\n"
                "size 2113710\n")
    steps("tokenize", 1)
    say(f"reading {path}")
    tok = Tokenizer.from_file(path)
    say(tok.get_vocab_size())


def hf_generation_config_cut() -> None:
    """generation_config.json cut short (a disk that filled while it was saved)."""
    from transformers import GenerationConfig
    GenerationConfig(max_new_tokens=64, do_sample=True, temperature=0.7,
                     top_p=0.9).save_pretrained(ARG)
    _cut(os.path.join(ARG, "generation_config.json"), 0.4)
    say(f"loading generation settings from {ARG}")
    g = GenerationConfig.from_pretrained(ARG)
    say(g)


def npy_half_written() -> None:
    """Precomputed embeddings in an .npy file whose writer was killed half-way."""
    import numpy as np
    path = os.path.join(ARG, "emb.npy")
    os.makedirs(ARG, exist_ok=True)
    np.save(path, np.random.rand(600, 256).astype("float32"))
    _cut(path, 0.55)
    say(f"loading embeddings {path}")
    emb = np.load(path)
    say(emb.shape)


class RunConfig:
    """A config object saved inside a checkpoint (weights_only=True refuses it)."""

    lr = 3e-4
    warmup = 500


def torch_weights_only_global() -> None:
    """torch >= 2.6 loads with weights_only=True: an intact checkpoint that holds a config
    object is refused by name (not a damaged file)."""
    import torch
    path = os.path.join(ARG, "last.pt")
    os.makedirs(ARG, exist_ok=True)
    torch.save({"model": torch.nn.Linear(8, 8).state_dict(), "cfg": RunConfig()}, path)
    say(f"resuming from {path}")
    ck = torch.load(path)
    say(sorted(ck))


# ---------------------------------------------------------------- sqlite

def sqlite_missing_dir() -> None:
    """An experiment tracker's sqlite database in a directory nobody created: sqlite's
    SQLITE_CANTOPEN (the same line as a directory the user may not write to)."""
    import sqlite3
    steps("hparam-search", 2)
    say(f"logging trials to {ARG}")
    con = sqlite3.connect(ARG)
    con.execute("create table if not exists trials (id integer, score real)")


# ---------------------------------------------------------------- torch.multiprocessing.spawn

def _spawn_load(rank: int, path: str) -> None:
    import torch
    say(f"rank {rank}: loading {path}/rank{rank}.pt")
    torch.load(f"{path}/rank{rank}.pt")


def _spawn_save(rank: int, path: str) -> None:
    import torch
    say(f"rank {rank}: saving optimizer shard")
    torch.save({"exp_avg": torch.randn(512, 512)}, f"{path}/optim-rank{rank}.pt")


def spawn_load_missing() -> None:
    """torch.multiprocessing.spawn workers resume from per-rank files that are not there:
    ProcessRaisedException prints the worker's traceback inside its message."""
    import torch.multiprocessing as mp
    steps("launch", 1)
    mp.spawn(_spawn_load, args=(ARG,), nprocs=2)


def spawn_save_full() -> None:
    """spawn workers save optimizer shards to a full filesystem."""
    import torch.multiprocessing as mp
    steps("launch", 1)
    mp.spawn(_spawn_save, args=(ARG,), nprocs=2)


if __name__ == "__main__":
    globals()[sys.argv[1]]()
