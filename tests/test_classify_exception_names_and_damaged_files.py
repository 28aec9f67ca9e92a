"""After held-out set 8: exception names, ONNX Runtime's status codes, damaged files of query
engines / indexes / archives, globs that match nothing, query engines' memory.

The line that ends a Python traceback is its exception whatever the class is called (ONNX
Runtime's InvalidGraph, grpc's _InactiveRpcError, a script's own Abort, _queue.Empty); an
ordinary log line after a traceback ("INFO: ...", "Note: ...") is not. A database, vector
index, tokenizer model or compressed archive cut short or not what it claims is
checkpoint_corrupt; a glob that matches nothing file_not_found; DuckDB's memory limit host_oom.
Wordings written here from each library's format (rules.yaml block "f8a" cites the sources),
not held-out set 8's lines. Pure logic over small written logs, plus one real Python process."""

from __future__ import annotations

from pathlib import Path

import pytest
from classifylib import run_py, verdict

from gpualert_slurm.classify import JobFacts, classify

FRAMES = ('Traceback (most recent call last):\n'
          '  File "/home/u/serve/main.py", line 88, in <module>\n'
          '    run(cfg)\n'
          '  File "/home/u/serve/main.py", line 61, in run\n'
          '    session = load(cfg.model_path)\n'
          '              ^^^^^^^^^^^^^^^^^^^^\n')


def crash(line: str, before: str = "loading config serve.yaml\nwarmup 3 batches\n") -> str:
    return before + FRAMES + line + "\n"


# ---- the traceback's last line is the exception, whatever the class is called ----

@pytest.mark.parametrize(("line", "name"), [
    ("onnxruntime.capi.onnxruntime_pybind11_state.NotImplemented: [ONNXRuntimeError] : 9 : "
     "NOT_IMPLEMENTED : Could not find an implementation for ConvInteger(10) node",
     "NotImplemented"),
    ("onnxruntime.capi.onnxruntime_pybind11_state.EPFail: [ONNXRuntimeError] : 11 : EP_FAIL : "
     "TensorRT EP failed to create engine from network", "EPFail"),
    ("grpc._channel._InactiveRpcError: <_InactiveRpcError of RPC that terminated with:\n"
     "\tstatus = StatusCode.UNAVAILABLE\n\tdetails = \"failed to connect to all addresses\"\n>",
     "_InactiveRpcError"),
    ("Abort: shard 12 has no rows after dedup", "Abort"),
    ("ShardSkew: rank 3 got 0 of 1024 shards", "ShardSkew"),
    ("featstore.client.StaleSnapshot: snapshot 2026-11-02 was compacted", "StaleSnapshot"),
    ("_queue.Empty", "Empty"),
])
def test_a_tracebacks_last_line_is_its_exception(tmp_path: Path, line: str, name: str) -> None:
    v = verdict(tmp_path, crash(line))
    assert (v.cls, v.detail) == ("python_exception", name), (v.cls, v.detail, v.step)
    assert v.step == "log_root" and v.evidence[0]["text"] == line.splitlines()[0]


def test_a_real_scripts_own_exception_class(tmp_path: Path) -> None:
    t = run_py(tmp_path, """
        class Retrain(Exception):
            pass
        print("epoch 1 done", flush=True)
        def check(n):
            if n == 0:
                raise Retrain(f"validation set has {n} rows")
        check(0)
        """)
    v = classify([t], JobFacts(exit_code=t.exit_code))
    assert (v.cls, v.detail) == ("python_exception", "Retrain"), (v.cls, v.detail)


@pytest.mark.parametrize("after", ["INFO: retrying in 5 s", "Note: the cache is rebuilt",
                                   "Epoch: 3 loss 0.21", "WARNING: tracker unreachable"])
def test_a_log_line_after_a_cut_traceback_is_no_exception(tmp_path: Path, after: str) -> None:
    v = verdict(tmp_path, crash(after))  # what it was before: a cut traceback, or nothing
    # (an unknown's detail may quote the line the log stops at: not as its exception)
    said = v.detail.split("; the log stops", 1)[0]
    assert v.step != "log_root" and after not in said, (v.cls, v.detail, v.step)
    assert all(e["text"] != after for e in v.evidence), v.evidence


def test_a_note_after_the_exception_line_changes_nothing(tmp_path: Path) -> None:
    v = verdict(tmp_path, crash("KeyError: 'label'") + "Note: see docs/labels.md\n")
    assert (v.cls, v.detail) == ("python_exception", "KeyError"), (v.cls, v.detail)


def test_a_logged_traceback_in_a_run_that_went_on_stays_success(tmp_path: Path) -> None:
    text = crash("Abort: shard 7 unreadable, skipped") + "epoch 2 loss 0.19\ntraining done\n"
    assert verdict(tmp_path, text, exit_code=0).cls == "success"


# ---- ONNX Runtime's status codes ----

@pytest.mark.parametrize(("line", "cls"), [
    ("onnxruntime.capi.onnxruntime_pybind11_state.NoSuchFile: [ONNXRuntimeError] : 3 : NO_SUCHFILE"
     " : Load model from /srv/models/ner.onnx failed:Load model /srv/models/ner.onnx failed. File "
     "doesn't exist", "file_not_found"),
    ("onnxruntime.capi.onnxruntime_pybind11_state.Fail: [ONNXRuntimeError] : 1 : FAIL : External "
     "data path validation failed for initializer: emb. Error: External data path does not exist: "
     "\"/srv/models/ner.onnx.data\"", "file_not_found"),
    ("onnxruntime.capi.onnxruntime_pybind11_state.InvalidProtobuf: [ONNXRuntimeError] : 7 : "
     "INVALID_PROTOBUF : Failed to load model because protobuf parsing failed.",
     "checkpoint_corrupt"),
    ("onnxruntime.capi.onnxruntime_pybind11_state.InvalidArgument: [ONNXRuntimeError] : 2 : "
     "INVALID_ARGUMENT : Load model from /srv/models/ner.onnx failed:No graph was found in the "
     "protobuf.", "checkpoint_corrupt"),
    ("onnxruntime.capi.onnxruntime_pybind11_state.InvalidGraph: [ONNXRuntimeError] : 10 : "
     "INVALID_GRAPH : This is an invalid model. Graph output (logits) does not exist in the graph.",
     "python_exception"),
    ("onnxruntime.capi.onnxruntime_pybind11_state.RuntimeException: [ONNXRuntimeError] : 6 : "
     "RUNTIME_EXCEPTION : Non-zero status code returned while running Reshape node.",
     "python_exception"),
])
def test_onnx_runtime_status_codes(tmp_path: Path, line: str, cls: str) -> None:
    v = verdict(tmp_path, crash(line))
    assert v.cls == cls, (v.cls, v.detail)


# ---- a database, index, tokenizer model or archive that is cut short or not what it claims ----

@pytest.mark.parametrize("line", [
    '_duckdb.IOException: IO Error: The file "/scratch/u1/runs.duckdb" exists, but it is not a '
    'valid DuckDB database file!',
    '_duckdb.IOException: IO Error: Could not read enough bytes from file "/scratch/runs.duckdb":'
    ' attempted to read 262144 bytes from location 1056768',
    "duckdb.duckdb.IOException: IO Error: Corrupt database file: computed checksum 1234 does not "
    "match stored checksum 99 in block at location 4096",
    "RuntimeError: Error in void faiss::read_vector(VectorT&, IOReader*) at faiss/impl/"
    "index_read.cpp:264: Error: 'ret == (size)' failed: read error in /idx/ivf.index: 512 != 8192 "
    "(Success)",
    'RuntimeError: Error in faiss::Index* faiss::read_index(IOReader*, int) at faiss/impl/'
    'index_read.cpp:1104: Index type 0x6f696a7b ("{jio") not recognized',
    "RuntimeError: Internal: could not parse ModelProto from /tok/bpe.model",
    "sqlite3.DatabaseError: database disk image is malformed",
    "sqlite3.DatabaseError: file is not a database",
    "lmdb.CorruptedError: mdb_get: MDB_CORRUPTED: Located page was wrong type",
    "lmdb.InvalidError: /data/train.lmdb: MDB_INVALID: File is not an LMDB file",
    "EOFError: Compressed file ended before the end-of-stream marker was reached",
    "tarfile.ReadError: unexpected end of data",
    "gzip.BadGzipFile: Not a gzipped file (b'<h')",
    "zlib.error: Error -3 while decompressing data: invalid stored block lengths",
])
def test_damaged_store_files_are_checkpoint_corrupt(tmp_path: Path, line: str) -> None:
    v = verdict(tmp_path, crash(line))
    assert v.cls == "checkpoint_corrupt", (v.cls, v.detail)


@pytest.mark.parametrize("tool", [
    "xz: (stdin): Unexpected end of input",
    "xz: step_9.tar.xz: Compressed data is corrupt",
    "gzip: stdin: unexpected end of file",
    "gzip: shards.tar.gz: invalid compressed data--format violated",
    "step_9.tar.zst : Decoding error (36) : Restored data doesn't match checksum",
    "/*stdin*\\ : Read error (39) : premature end",
    "bzip2: Compressed file ends unexpectedly;\n\tperhaps it is corrupted?  *Possible* reason",
])
def test_an_archive_cut_short_while_unpacking(tmp_path: Path, tool: str) -> None:
    text = (f"restoring checkpoint step_9\n{tool}\ntar: Unexpected EOF in archive\n"
            "tar: Unexpected EOF in archive\ntar: Error is not recoverable: exiting now\n")
    v = verdict(tmp_path, text, exit_code=2)
    assert v.cls == "checkpoint_corrupt", (v.cls, v.detail)


def test_tar_noting_leading_slashes_is_no_damage(tmp_path: Path) -> None:
    text = "tar: Removing leading `/' from member names\n" + crash("KeyError: 'step'")
    assert verdict(tmp_path, text).cls == "python_exception"


# ---- globs and dataset paths that match nothing ----

@pytest.mark.parametrize("line", [
    '_duckdb.IOException: IO Error: No files found that match the pattern "/lake/logs/*.json"',
    "polars.exceptions.ComputeError: failed to retrieve first file schema (csv): expanded paths "
    "were empty (path expansion input: 'paths: [\"/lake/x/*.csv\"]', glob: true).",
    "tensorflow.python.framework.errors_impl.InvalidArgumentError: Expected 'tf.Tensor(False, "
    "shape=(), dtype=bool)' to be true. Summarized data: b'No files matched pattern: "
    "/tfr/train-*.tfrecord'",
    "datasets.data_files.EmptyDatasetError: The directory at /data/corpus_v3 doesn't contain any "
    "data files",
    "ValueError: At least one valid data file must be specified, all the data_files are invalid: "
    "{'train': []}",
])
def test_a_glob_that_matches_nothing_is_file_not_found(tmp_path: Path, line: str) -> None:
    v = verdict(tmp_path, crash(line))
    assert v.cls == "file_not_found", (v.cls, v.detail)


def test_a_warning_of_an_empty_glob_is_not_the_cause(tmp_path: Path) -> None:
    text = "WARN: no files matched pattern: seeds/*.sql\n" + crash("ValueError: lr must be > 0")
    v = verdict(tmp_path, text)
    assert (v.cls, v.detail) == ("python_exception", "ValueError"), (v.cls, v.detail)


# ---- query engines' memory ----

@pytest.mark.parametrize("line", [
    "_duckdb.OutOfMemoryException: Out of Memory Error: failed to allocate data of size 256.0 MiB "
    "(1.8 GiB/1.8 GiB used)",
    "duckdb.duckdb.OutOfMemoryException: Out of Memory Error: could not allocate block of size "
    "256.0 KiB (7.4 GiB/7.4 GiB used)",
])
def test_duckdb_memory_limit_is_host_oom(tmp_path: Path, line: str) -> None:
    v = verdict(tmp_path, crash(line) + "Possible solutions:\n* Reducing the number of threads "
                "(SET threads=X)\n")
    assert v.cls == "host_oom", (v.cls, v.detail)
