"""The family of classify/rules/60-files-and-dataloaders.yaml: ONNX Runtime's status codes; stores,
indexes, tokenizer models and archives cut short or not what they claim (checkpoint_corrupt);
globs that match nothing, paths a library says are not there, missing scripts and commands,
object stores' not-found and denied, sqlite's cannot-open and read-only databases
(file_not_found, permission_denied); DataLoader workers (the loader's own timeout, torch's
shared-memory segment full) and tensors on different devices; DuckDB's memory limit. Benign or
keyed mentions stay what they were. Pure logic over small written logs, plus real Python
processes."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from classifylib import (
    CHAIN,
    FSSPEC,
    LOSSES,
    MAIN_TB,
    MSGS_PROG,
    PROGRESS,
    SITE,
    TORCH_PY,
    TRAINING,
    USER,
    USER_LOADER,
    crash,
    log_alone,
    need_torch_venv,
    run,
    run_prog,
    run_verdict,
    tb,
    tb_by_frame,
    tb_by_line,
    verdict,
    write,
)

from gpualert_slurm.classify import (
    JobFacts,
    TaskInput,
    classify,
)

DL = (f"{SITE}/torch/utils/data/dataloader.py", "_get_data", "raise RuntimeError(")

SDL = (f"{SITE}/torchdata/stateful_dataloader/stateful_dataloader.py", "_get_data",
       "raise RuntimeError(")


def test_no_usable_temporary_directory_really_run(tmp_path: Path) -> None:
    """Every candidate of tempfile (/tmp, /var/tmp, /usr/tmp, the cwd) on a full tmpfs, in a
    private mount namespace: a FileNotFoundError that is a full disk."""
    w = tmp_path / "w"
    # A candidate this machine lacks (Debian 13 has no /usr/tmp) is skipped: a failed
    # redirection's "No such file or directory" from bash is the harness's, not the job's.
    script = (f"mkdir -p {w} && mount -t tmpfs -o size=64k tmpfs {w} && cd {w} && "
              "for d in . /var/tmp /usr/tmp /tmp; do [ -d $d ] || continue; [ $d = . ] || "
              "mount -t tmpfs -o size=64k tmpfs $d; head -c 1000000 /dev/zero 2>/dev/null "
              f'> $d/fill; done; exec {TORCH_PY} -c "$F10_PROG" tempdir')
    # the program's text goes in by the environment: a checkout under /tmp is hidden by then
    p = subprocess.run(["unshare", "-m", "bash", "-c", script], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, F10_PROG=MSGS_PROG.read_text()))
    assert p.returncode == 1 and "No usable temporary directory" in p.stdout + p.stderr
    v = verdict(tmp_path, p.stdout + p.stderr)
    assert v.cls == "disk_full" and v.confidence <= 0.7 and "/tmp" in v.detail


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


def test_python_missing_script(tmp_path):
    t = run(tmp_path, None, str(tmp_path / "no_such_train.py"))
    assert run_verdict(t).cls == "file_not_found"


def test_sqlite_readonly_is_permission_denied(tmp_path):
    db = tmp_path / "runs.db"
    sqlite3.connect(db).execute("create table t(x)").connection.commit()
    t = run(tmp_path, f"""
        import sqlite3
        c = sqlite3.connect('file:{db}?mode=ro', uri=True)
        c.execute('insert into t values (1)')
        """)
    assert "readonly database" in Path(t.path).read_text()
    assert run_verdict(t).cls == "permission_denied"


def test_sqlite_cannot_open_is_file_not_found_with_low_confidence(tmp_path):
    t = run(tmp_path, "import sqlite3; sqlite3.connect('/no/such/dir/metrics.db')")
    v = run_verdict(t)
    assert v.cls == "file_not_found" and v.confidence <= 0.6, (v.cls, v.confidence)


def test_shell_command_not_found(tmp_path):
    log = tmp_path / "0.0.log"
    with open(log, "wb") as out:
        p = subprocess.run(["bash", "-c", "echo start; gpualert-no-such-launcher --nproc 2"],
                           stdout=out, stderr=subprocess.STDOUT, timeout=30)
    assert p.returncode == 127
    t = TaskInput(str(log), rank=0, step="0", exit_code=127)
    assert run_verdict(t).cls == "file_not_found"


# ---- device_mismatch: each framework's words for arguments on different devices ----

@pytest.mark.parametrize("exc", [
    "ValueError: Received incompatible devices for pjitted computation. Got argument params of "
    "update with shape float32[512] and device ids [0] on platform GPU and argument grads of "
    "update with shape float32[512] and device ids [3] on platform GPU",
    "ValueError: primitive arguments must be colocated on the same device (C++ jax.jit). "
    "Arguments are on devices: gpu:0 and gpu:1",
    "tensorflow.python.framework.errors_impl.InvalidArgumentError: Tensors on conflicting "
    "devices: cannot compute MatMul as input #1(zero-based) was expected to be on "
    "/job:localhost/replica:0/task:0/device:GPU:0 but is actually on "
    "/job:localhost/replica:0/task:0/device:CPU:0 (operation running on "
    "/job:localhost/replica:0/task:0/device:GPU:0) [Op:MatMul]",
    "tensorflow.python.framework.errors_impl.InvalidArgumentError: Trying to access resource "
    "encoder/embeddings/0 (defined @ /home/u/m.py:12) located in device "
    "/job:localhost/replica:0/task:0/device:GPU:1 from device "
    "/job:localhost/replica:0/task:0/device:GPU:0 [Op:__inference_step_77]",
    "RuntimeError: indices should be either on cpu or on the same device as the indexed tensor "
    "(cuda:1)",
    "RuntimeError: Tensor for argument #2 'mat1' is on CPU, but expected it to be on GPU (while "
    "checking arguments for addmm)",
    "RuntimeError: expected device cuda:0 but got device cpu",
])
def test_arguments_on_different_devices(tmp_path: Path, exc: str) -> None:
    v = verdict(tmp_path, PROGRESS + tb_by_line(USER, exc=exc))
    assert v.cls == "device_mismatch", v.to_json()


def test_device_placement_mention_then_success(tmp_path: Path) -> None:
    text = ("moving the batch to the same device as the model (cuda:0)\n"
            "devices: [CudaDevice(id=0), CudaDevice(id=1)]\n" + PROGRESS + "done\n")
    assert verdict(tmp_path, text, exit_code=0).cls == "success"


# ---- dataloader_worker: the DataLoader's own timeout ----

@pytest.mark.parametrize("fr, exc", [
    (DL, "RuntimeError: DataLoader timed out after 120 seconds"),
    (SDL, "RuntimeError: DataLoader timed out after 1800 seconds"),
    (DL, "RuntimeError: DataLoader timed out after 2.5 seconds"),
    (DL, "RuntimeError: Pin memory thread exited unexpectedly"),
])
def test_dataloader_timeout_is_the_loader(tmp_path: Path, fr: tuple[str, str, str],
                                          exc: str) -> None:
    v = verdict(tmp_path, PROGRESS + tb_by_frame(USER_LOADER, fr, exc=exc))
    assert v.cls == "dataloader_worker", (v.cls, v.evidence)
    assert "timed out" not in exc or "stuck" in v.detail


def test_dataloader_timeout_setting_mentioned_is_no_failure(tmp_path: Path) -> None:
    # a config dump naming the option, then the program's own error: the error decides
    text = ("loader: num_workers=8 timeout=120 (DataLoader timed out after 120 seconds "
            "would mean a stuck worker)\n" + PROGRESS
            + tb_by_frame(USER_LOADER, exc="KeyError: 'labels'"))
    v = verdict(tmp_path, text)
    assert v.cls == "python_exception", (v.cls, v.evidence)


# ---- /dev/shm: torch's and NCCL's shared-memory segments ----

@pytest.mark.parametrize("line", [
    "RuntimeError: unable to write to file </torch_4120_2837461_3>: No space left on device (28)",
    "RuntimeError: unable to allocate shared memory(shm) for file </torch_77_91283_12>: "
    "No space left on device (28)",
    "RuntimeError: unable to open shared memory object </torch_812_338_0> in read-write mode: "
    "Too many open files (24)",
])
def test_torch_shared_memory_segment_full_is_dataloader_worker(tmp_path: Path, line: str) -> None:
    log = (MAIN_TB + "RuntimeError: Caught RuntimeError in DataLoader worker process 1.\n"
           "Original Traceback (most recent call last):\n" + line + "\n")
    v = verdict(tmp_path, log)
    assert v.cls == "dataloader_worker", v.to_json()


def test_fsspec_url_not_found_alone_is_a_missing_remote_file(tmp_path: Path) -> None:
    # a 404: fsspec raises FileNotFoundError(url) from its own FileNotFoundError(url)
    url = "FileNotFoundError: https://data.example.org/val/val-001.jsonl"
    v = verdict(tmp_path, PROGRESS + tb(FSSPEC, exc=url) + CHAIN + tb(USER, FSSPEC, exc=url))
    assert v.cls == "file_not_found"
    assert v.confidence <= 0.6  # fsspec says this for any failed request


def test_local_file_not_found_stays_file_not_found(tmp_path: Path) -> None:
    exc = "FileNotFoundError: [Errno 2] No such file or directory: '/scratch/u/val-000.jsonl'"
    v = verdict(tmp_path, PROGRESS + tb(USER, exc=exc))
    assert v.cls == "file_not_found" and v.confidence >= 0.9


# ---- file_not_found: a library's own words for a path that is not there ----

@pytest.mark.parametrize("exc", [
    "OSError: SavedModel file does not exist at: /exports/serving/enc/7/"
    "{saved_model.pbtxt|saved_model.pb}",
    "tensorflow.python.framework.errors_impl.NotFoundError: Unsuccessful TensorSliceReader "
    "constructor: Failed to find any matching files for /scratch/u/run4/ckpt-1200",
    "OSError: /models/enc-small does not appear to have a file named config.json. Checkout "
    "'https://huggingface.co//models/enc-small/tree/main' for available files.",
    "OSError: Error no file named model.safetensors, or pytorch_model.bin, found in directory "
    "./runs/exp3/final.",
    "OSError: Can't load tokenizer for '/models/tok-v2'. If you were trying to load it from "
    "'https://huggingface.co/models', make sure you don't have a local directory with the same "
    "name.",
    "ValueError: The provided filename ./exports/scripted.pt does not exist",
    "AssertionError: annotation file ~/data/coco/instances_val.json doesn't exist",
    "RuntimeError: Could not find vocabulary at /opt/models/spm/vocab.model",
    "RuntimeError: '/data/shards/train-000.tar' not found",
])
def test_a_library_says_a_path_is_not_there(tmp_path: Path, exc: str) -> None:
    v = verdict(tmp_path, PROGRESS + tb(USER, exc=exc))
    assert v.cls == "file_not_found", (v.cls, v.evidence)


@pytest.mark.parametrize("text, exit_code, cls", [
    # log lines, not exceptions: the program goes on
    ("INFO output directory /scratch/u/run3 does not exist, creating it\n" + PROGRESS, 0,
     "success"),
    ("warning: /data/cache does not exist, caching disabled\n" + PROGRESS, 0, "success"),
    # a checkpoint key, not a path; a key with slashes
    (tb(USER, exc="tensorflow.python.framework.errors_impl.NotFoundError: Key dense/kernel not "
                  "found in checkpoint"), 1, "python_exception"),
    (tb(USER, exc="KeyError: \"key 'model/encoder' not found\""), 1, "python_exception"),
])
def test_benign_or_keyed_does_not_exist_mentions(tmp_path: Path, text: str, exit_code: int,
                                                 cls: str) -> None:
    assert verdict(tmp_path, text, exit_code=exit_code).cls == cls


# ---- sqlite: SQLITE_CANTOPEN says the same for a missing directory and an unwritable one ----

def test_sqlite_cantopen_is_modest_and_names_both_causes(tmp_path: Path) -> None:
    text = PROGRESS + tb(USER, ("/home/u/proj/track.py", "open_db", "con = sqlite3.connect(path)"),
                         exc="sqlite3.OperationalError: unable to open database file")
    v = verdict(tmp_path, text)
    assert v.cls == "file_not_found" and v.confidence <= 0.6
    assert "missing" in v.detail and "not writable" in v.detail


def test_sqlite_readonly_database_is_permission(tmp_path: Path) -> None:
    text = PROGRESS + tb(USER, exc="sqlite3.OperationalError: attempt to write a readonly database")
    assert verdict(tmp_path, text).cls == "permission_denied"


@pytest.mark.parametrize("exc, cls", [
    ("botocore.exceptions.ClientError: An error occurred (NoSuchKey) when calling the GetObject "
     "operation: The specified key does not exist.", "file_not_found"),
    ("google.api_core.exceptions.NotFound: 404 GET https://storage.googleapis.com/storage/v1/b/"
     "bkt/o/ckpt%2Fstep-900: No such object: bkt/ckpt/step-900", "file_not_found"),
    ("botocore.exceptions.ClientError: An error occurred (AccessDenied) when calling the "
     "PutObject operation: Access Denied", "permission_denied"),
    ("google.api_core.exceptions.Forbidden: 403 GET https://storage.googleapis.com/storage/v1/b/"
     "bkt/o/x: svc@p.iam.gserviceaccount.com does not have storage.objects.get access to the "
     "Google Cloud Storage object.", "permission_denied"),
])
def test_object_store_not_found_and_denied(tmp_path: Path, exc: str, cls: str) -> None:
    v = verdict(tmp_path, PROGRESS + tb(USER, exc=exc))
    assert v.cls == cls, (v.cls, v.evidence)


def test_raw_exception_dump_of_a_lost_fd_sharing_connection_is_dataloader_worker(tmp_path):
    """Python's last-resort dump ("lost sys.stderr") of the ConnectionResetError that
    multiprocessing's resource_sharer thread got when a DataLoader worker died."""
    path = write(tmp_path, "0.0.log", LOSSES + "Traceback (most recent call last):\n"
                 "object address  : 0x7f4291351340\nobject refcount : 2\nobject type     : "
                 "0x9ec680\nobject type name: ConnectionResetError\nobject repr     : "
                 "ConnectionResetError(104, 'Connection reset by peer')\nlost sys.stderr\n")
    assert classify([TaskInput(path)], JobFacts(exit_code=1)).cls == "dataloader_worker"


# ---- a DataLoader wrapper naming a missing file, its worker's traceback cut (was: unknown) ----

@pytest.mark.parametrize("tail", [
    "", "Original Traceback (most recent call last):\n  File \"/x/torch/utils/data/_utils/"
    "worker.py\", line 308, in _worker_loop\n    data = fetcher.fetch(index)\n"])
def test_loader_wrapper_naming_a_missing_file_when_the_worker_traceback_is_cut(
        tmp_path: Path, tail: str) -> None:
    text = (TRAINING + "Traceback (most recent call last):\n  File \"train.py\", line 50, in "
            "<module>\n    for batch in loader:\n  File \"/x/torch/_utils.py\", line 461, in "
            "reraise\n    raise exception\nFileNotFoundError: Caught FileNotFoundError in "
            "DataLoader worker process 1.\n" + tail)
    assert log_alone(tmp_path, text) == "file_not_found"


# ---- a traceback cut before (or inside) its exception line: what its last frames say ----
# Pasted excerpts, a log killed mid-write and a bounded tail stop inside a traceback. Where the
# last frames or the launcher's line just before say what raised, the class is theirs; the
# lines below are real programs' output (a real pickle, torch.save, torchrun), cut afterwards.

def _cut_exception_line(text: str, keep: int) -> str:
    """The log cut `keep` characters into its last line (0: the line is gone)."""
    body, last = text.rstrip("\n").rsplit("\n", 1)
    return body + "\n" + (last[:keep] + "\n" if keep else "")


TRUNCATED_PICKLE = """\
    import pickle
    with open("weights.pkl", "wb") as f:
        f.write(pickle.dumps({"conv1": list(range(5000))})[:-4000])
    def load_pretrained(path):
        with open(path, "rb") as f:
            return pickle.load(f, encoding="latin1")
    load_pretrained("weights.pkl")
"""


@pytest.mark.parametrize("keep", [0, 10, 21, None])
def test_pickle_load_frame_cut_before_its_exception_is_checkpoint_corrupt(
        tmp_path: Path, keep) -> None:
    # (was: python_exception) pickle.load of a truncated weights file; the log cut inside the
    # exception line ("_pickle.Unpickl"), right after its last frame, or kept whole (held before)
    text = run_prog(tmp_path, sys.executable, TRUNCATED_PICKLE)
    assert "UnpicklingError: pickle data was truncated" in text
    cut = text if keep is None else _cut_exception_line(text, keep)
    assert log_alone(tmp_path, TRAINING + cut) == "checkpoint_corrupt"


TORCH_SAVE_ESTALE = """\
    import errno, io, torch
    class NfsFile(io.RawIOBase):
        def writable(self):
            return True
        def write(self, b):
            raise OSError(errno.ESTALE, "Stale file handle")
    def save_checkpoint(state):
        torch.save(state, NfsFile())
    save_checkpoint({"w": torch.zeros(1000)})
"""


def test_torch_save_cut_inside_its_frames_is_storage_io(tmp_path: Path) -> None:
    need_torch_venv()
    # (was: python_exception) a real torch.save whose file write fails; whole, its errno decides
    # (held before); cut after torch/serialization.py's save frames, the writer's frames do
    text = run_prog(tmp_path, TORCH_PY, TORCH_SAVE_ESTALE)
    assert "[Errno 116] Stale file handle" in text
    assert log_alone(tmp_path, TRAINING + text) == "storage_io"
    first = text[:text.index("During handling")]
    cut = first[:first.index("in _save\n") + len("in _save\n")]
    assert log_alone(tmp_path, TRAINING + cut) == "storage_io"
