"""The family of classify/rules/55-storage-and-checkpoints.yaml: exceptions with a class of their
own. Imports that fail; full disks (sqlite's, an iostream's, a disk-full line that ends an
exit-0 log); storage I/O (remote object / HTTP storage clients, fsspec, errnos inside a
library's error type, a data server that breaks); checkpoints and model files that do not load
(torch's weights_only refusal, files that exist but do not parse, short reads of arrays and
models); NaN in the input data, which is a data error. A wrapper exception (DCP's
CheckpointException, Ray's RayTaskError, urllib's URLError) keeps the error it caught. Pure
logic over small written logs, plus real Python processes."""

from __future__ import annotations

from pathlib import Path

import pytest
from classifylib import (
    CHAIN,
    FSSPEC,
    MAIN_TB,
    PROGRESS,
    SITE,
    TORCH_LOAD,
    TRAINING,
    USER,
    USER_LOADER,
    frames,
    job_verdict,
    log_alone,
    run,
    run_verdict,
    task,
    tb,
    tb_by_frame,
    verdict,
)

SERVER = """
    import socket, threading, urllib.request
    s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()
    def serve():
        c, _ = s.accept(); c.recv(4096)
        {reply}
        c.close()
    threading.Thread(target=serve, daemon=True).start()
    r = urllib.request.urlopen(f'http://127.0.0.1:{{s.getsockname()[1]}}/shard.tar', timeout=20)
    r.read()
    """

WO_HEAD = ("_pickle.UnpicklingError: Weights only load failed. Re-running `torch.load` with "
           "`weights_only` set to `False` will likely succeed, but it can result in arbitrary "
           "code execution. Do it only if you got the file from a trusted source.\n")

FIT_TB = ('Traceback (most recent call last):\n  File "/srv/fit.py", line 40, in <module>\n'
          '    model.fit(features, target)\n  File "/venv/lib/python3.11/site-packages/sklearn/'
          'utils/validation.py", line 186, in _assert_all_finite_element_wise\n'
          '    raise ValueError(msg_err)\n')

AIO = (f"{SITE}/aiohttp/client.py", "_request", "resp = await handler(req)")

DCP_FRAMES = frames(
    (f"{SITE}/torch/distributed/checkpoint/utils.py", "all_reduce", "local_data = map_fun()"),
    (f"{SITE}/torch/distributed/checkpoint/state_dict_saver.py", "write_data",
     "all_writes = storage_writer.write_data(final_local_plan, planner)"),
    (f"{SITE}/torch/distributed/checkpoint/filesystem.py", "_write_data",
     "_write_files_from_queue("),
    (f"{SITE}/torch/distributed/checkpoint/filesystem.py", "_write_item",
     "torch.save(data, transform_to)"),
    (f"{SITE}/torch/serialization.py", "save", "with _open_zipfile_writer(f) as opened_zipfile:"),
)

TOK_LOADER = (f"{SITE}/transformers/tokenization_utils_base.py", "_from_pretrained",
              "with open(tokenizer_file, encoding=\"utf-8\") as f: tokenizer_json = json.load(f)")

JSON_FRAMES = (("/usr/lib/python3.11/json/__init__.py", "loads",
                "return _default_decoder.decode(s)"),
               ("/usr/lib/python3.11/json/decoder.py", "raw_decode",
                "raise JSONDecodeError(\"Expecting value\", s, err.value) from None"))

WO = ("_pickle.UnpicklingError: Weights only load failed. This file can still be loaded, to do "
      "so you have two options, do those steps only if you trust the source of the checkpoint.\n"
      "\t(1) In PyTorch 2.6, we changed the default value of the `weights_only` argument in "
      "`torch.load` from `False` to `True`. Re-running `torch.load` with `weights_only` set to "
      "`False` will likely succeed.\n")


# ---- errno inside a library's error type; meta tensors; HF hub ----

@pytest.mark.parametrize("line,cls", [
    ("safetensors._safetensors_rust.SafetensorError: Error while serializing: I/O error: No "
     "space left on device (os error 28)", "disk_full"),
    ("safetensors_rust.SafetensorError: Error while serializing: I/O error: Permission denied "
     "(os error 13)", "permission_denied"),
    ("safetensors_rust.SafetensorError: Error while deserializing header: "
     "MetadataIncompleteBuffer", "checkpoint_corrupt"),
    ("IndexError: Read less bytes than requested", "checkpoint_corrupt"),
    ("NotImplementedError: Cannot copy out of meta tensor; no data!", "device_mismatch"),
    ("RuntimeError: Tensor.item() cannot be called on meta tensors", "device_mismatch"),
    ("OSError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': "
     "'/scratch/ckpt/run1/final'. Use `repo_type` argument if needed.", "file_not_found"),
    ("huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to "
     "locate the file on the Hub and we cannot find the requested files in the local cache.",
     "storage_io"),
])
def test_wording_classes(tmp_path: Path, line: str, cls: str) -> None:
    log = "Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n" + line
    assert job_verdict([task(tmp_path, log + "\n")]).cls == cls


# ---- chained tracebacks: the exception that ended the program decides ----

def test_chain_last_exception_decides_missing_distribution(tmp_path):
    # importlib.metadata raises PackageNotFoundError while handling StopIteration
    t = run(tmp_path, "import importlib.metadata as m; m.version('gpualert-no-such-dist-x')")
    log = Path(t.path).read_text()
    assert "During handling of the above exception" in log  # really a chain
    v = run_verdict(t)
    assert v.cls == "import_error", (v.cls, v.detail)
    assert "PackageNotFoundError" in v.evidence[0].text
    assert "StopIteration" not in v.detail


def test_chain_generic_wrapper_keeps_specific_cause(tmp_path):
    t = run(tmp_path, """
        try:
            open('/dev/full', 'w').write('x' * 65536)
        except OSError as e:
            raise RuntimeError('saving the checkpoint failed') from e
        """)
    assert "direct cause of the following" in Path(t.path).read_text()
    v = run_verdict(t)
    assert v.cls == "disk_full", (v.cls, v.detail)


def test_chain_connection_refused_wrapped_in_urlerror_is_storage_io(tmp_path):
    t = run(tmp_path, """
        import socket, urllib.request
        s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()
        urllib.request.urlopen(f'http://127.0.0.1:{port}/shard-00017.tar', timeout=10)
        """)
    assert "ConnectionRefusedError" in Path(t.path).read_text()
    v = run_verdict(t)
    assert v.cls == "storage_io", (v.cls, v.detail)
    assert "URLError" in v.evidence[0].text or "urlopen" in v.evidence[0].text


# ---- Python failures without a traceback ----

def test_python_dash_m_missing_module(tmp_path):
    t = run(tmp_path, None, "-m", "gpualert_no_such_pkg_q")
    log = Path(t.path).read_text()
    assert "Traceback" not in log and "ModuleNotFoundError" not in log
    assert run_verdict(t).cls == "import_error"


# ---- library wording ----

def test_sqlite_full_is_disk_full(tmp_path):
    t = run(tmp_path, """
        import sqlite3
        c = sqlite3.connect(':memory:'); c.execute('pragma max_page_count=3')
        c.execute('create table t(x)')
        for _ in range(50):
            c.execute('insert into t values (?)', ('x' * 4000,))
        """)
    assert "database or disk is full" in Path(t.path).read_text()
    assert run_verdict(t).cls == "disk_full"


@pytest.mark.parametrize("code,expected", [
    ("import errno, os; raise OSError(errno.EROFS, os.strerror(errno.EROFS), '/datasets/out')",
     "permission_denied"),
    ("import errno, os; raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), '/home/u/ck')",
     "disk_full"),
    # another language's wording of ENOSPC (Go's os.PathError), no traceback
    ("import sys; print('write /scratch/ckpt/step_900.bin: no space left on device'); "
     "sys.exit(1)", "disk_full"),
])
def test_errno_wordings(tmp_path, code, expected):
    assert run_verdict(run(tmp_path, code)).cls == expected


def test_iostream_error_alone_is_weak_disk_full(tmp_path):
    t = run(tmp_path, "import sys; print('saving: basic_ios::clear: iostream error', "
                      "file=sys.stderr); sys.exit(1)")
    v = run_verdict(t)
    assert v.cls == "disk_full" and v.confidence <= 0.5, (v.cls, v.confidence)


@pytest.mark.parametrize("reply,word", [
    ("pass", "RemoteDisconnected"),
    ("c.sendall(b'HTTP/1.0 200 OK\\r\\nContent-Length: 5000\\r\\n\\r\\nabc')", "IncompleteRead"),
])
def test_broken_data_server_is_storage_io(tmp_path, reply, word):
    t = run(tmp_path, SERVER.format(reply=reply))
    assert word in Path(t.path).read_text()
    v = run_verdict(t)
    assert v.cls == "storage_io", (v.cls, v.detail)


@pytest.mark.parametrize("status,expected", [(503, "storage_io"), (404, "file_not_found")])
def test_http_status_of_a_data_server(tmp_path, status, expected):
    reply = f"c.sendall(b'HTTP/1.0 {status} X\\r\\nContent-Length: 0\\r\\n\\r\\n')"
    t = run(tmp_path, SERVER.format(reply=reply))
    assert f"HTTP Error {status}" in Path(t.path).read_text()
    assert run_verdict(t).cls == expected


@pytest.mark.parametrize("why, name", [
    # torch 2.4 (no safe_globals context manager yet)
    ("WeightsUnpickler error: Unsupported global: GLOBAL omegaconf.dictconfig.DictConfig was "
     "not an allowed global by default. Please use `torch.serialization.add_safe_globals("
     "[DictConfig])` to allowlist this global if you trust this class/function.",
     "omegaconf.dictconfig.DictConfig"),
    ("Trying to load unsupported GLOBAL posix.system whose module posix is blocked.",
     "posix.system"),
    ("WeightsUnpickler error: Can only build Tensor, Parameter, OrderedDict or types allowlisted "
     "via `add_safe_globals`, but got <class 'trainer.state.EMAState'>",
     "<class 'trainer.state.EMAState'>"),
    ("WeightsUnpickler error: Trying to call reduce for unrecognized function <built-in method "
     "_reconstruct of type object at 0x7f3a>", "<built-in method _reconstruct of type object at "
     "0x7f3a>"),
    ("``torch.distributed.tensor`` must be imported to load DTensors",
     "torch.distributed.tensor"),
    # torch 2.0-2.3
    ("WeightsUnpickler error: Unsupported class numpy.core.multiarray._reconstruct",
     "numpy.core.multiarray._reconstruct"),
])
def test_weights_only_refusal_is_a_checkpoint_not_loadable(tmp_path: Path, why: str,
                                                           name: str) -> None:
    v = verdict(tmp_path, PROGRESS + tb_by_frame(USER_LOADER, TORCH_LOAD, exc=WO_HEAD + why))
    assert v.cls == "checkpoint_corrupt", (v.cls, v.evidence)
    assert f"refused {name} held in the checkpoint" in v.detail, v.detail
    assert "add_safe_globals" in v.detail and "weights_only=False" in v.detail


def test_weights_only_mentioned_in_a_warning_is_no_failure(tmp_path: Path) -> None:
    # torch's FutureWarning about the coming default, then a clean run: success
    text = (f"{SITE}/torch/serialization.py:1600: FutureWarning: You are using `torch.load` "
            "with `weights_only=False` ... We recommend you start setting `weights_only=True` "
            "... allowlisted by the user via `torch.serialization.add_safe_globals`.\n"
            + PROGRESS + "done: saved /ckpt/final.pt\n")
    assert verdict(tmp_path, text, exit_code=0).cls == "success"


# ---- NaN in the input data is a data error; a zero count of NaNs is no alarm ----

@pytest.mark.parametrize("last", [
    "ValueError: Input y contains NaN.",
    "ValueError: Input sample_weight contains infinity or a value too large for "
    "dtype('float32').",
    "ValueError: Input contains NaN, infinity or a value too large for dtype('float64').",
    "pandas.errors.IntCastingNaNError: Cannot convert non-finite values (NA or inf) to integer. "
    "Replace or remove non-finite values or cast to an integer type that supports these values",
    "ValueError: cannot convert float NaN to integer",
    "ValueError: Cannot mask with non-boolean array containing NA / NaN values",
])
def test_nan_in_input_data_is_a_data_error(tmp_path, last):
    v = verdict(tmp_path, "loaded 50000 rows\n" + FIT_TB + last + "\n", exit_code=1)
    assert v.cls == "python_exception", (v.cls, v.detail)


def test_estimator_refusing_nan_is_a_data_error(tmp_path):
    text = (FIT_TB + "ValueError: Input X contains NaN.\nRidge does not accept missing values "
            "encoded as NaN natively. For supervised learning, you might want to consider ...\n")
    v = verdict(tmp_path, text, exit_code=1)
    assert (v.cls, v.detail) == ("python_exception", "ValueError")


def test_the_jobs_own_disk_full_stays_disk_full(tmp_path: Path) -> None:
    log = MAIN_TB + "OSError: [Errno 28] No space left on device: '/scratch/u/ckpt/step_900.pt'\n"
    v = verdict(tmp_path, log)
    assert v.cls == "disk_full", v.to_json()


# ---- short reads of serialized arrays and models ----

@pytest.mark.parametrize("line", [
    "ValueError: EOF: reading array header, expected 118 bytes got 40",
    "ValueError: EOF: reading magic string, expected 6 bytes got 0",
    "ValueError: EOF: reading array data, expected 400000 bytes got 131072",
    "[LightGBM] [Fatal] Model format error, expect a tree here. met feature_importances:",
    "lightgbm.basic.LightGBMError: Model file doesn't specify max_feature_idx",
])
def test_short_reads_of_arrays_and_models_are_checkpoint_corrupt(tmp_path: Path, line: str) -> None:
    v = verdict(tmp_path, "loading model from /data/m/ensemble.bin\n" + MAIN_TB + line + "\n")
    assert v.cls == "checkpoint_corrupt", v.to_json()


# ---- storage_io: remote object / HTTP storage client errors ----

@pytest.mark.parametrize("exc", [
    "aiohttp.client_exceptions.ClientOSError: [Errno 104] Connection reset by peer",
    "aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host store.internal:443 "
    "ssl:default [Connect call failed ('10.0.3.7', 443)]",
    "aiohttp.client_exceptions.ServerTimeoutError: Timeout on reading data from socket",
    "aiohttp.client_exceptions.ClientPayloadError: Response payload is not completed: "
    "<TransferEncodingError: 400, message='Not enough data to satisfy transfer length header.'>",
    "aiohttp.client_exceptions.ClientResponseError: 502, message='Bad Gateway', "
    "url='https://store.internal/shards/00017.tar'",
    "botocore.exceptions.ConnectionClosedError: Connection was closed before we received a valid "
    "response from endpoint URL: \"https://s3.us-east-1.amazonaws.com/bkt/shards/00017.tar\".",
    "botocore.exceptions.ResponseStreamingError: An error occurred while reading from response "
    "stream: ('Connection broken: IncompleteRead(0 bytes read, 1024 more expected)', ...)",
    "botocore.exceptions.IncompleteReadError: 65536 read, but total bytes expected is 1048576.",
    "botocore.exceptions.ClientError: An error occurred (SlowDown) when calling the GetObject "
    "operation (reached max retries: 4): Please reduce your request rate.",
    # requests / urllib3 / google-api-core / fsspec lines alone (no chain printed)
    "requests.exceptions.ReadTimeout: HTTPSConnectionPool(host='data.example.org', port=443): "
    "Read timed out. (read timeout=30)",
    "requests.exceptions.ChunkedEncodingError: (\"Connection broken: InvalidChunkLength(got "
    "length b'', 0 bytes read)\", InvalidChunkLength(got length b'', 0 bytes read))",
    "urllib3.exceptions.ProtocolError: Response ended prematurely",
    "google.api_core.exceptions.ServiceUnavailable: 503 GET https://storage.googleapis.com/"
    "download/storage/v1/b/bkt/o/shard-7: We encountered an internal error. Please try again.",
    "fsspec.exceptions.FSTimeoutError",
])
def test_remote_storage_client_errors(tmp_path: Path, exc: str) -> None:
    v = verdict(tmp_path, PROGRESS + tb(USER, AIO, exc=exc))
    assert v.cls == "storage_io", (v.cls, v.evidence)


@pytest.mark.parametrize("cause", [
    "aiohttp.client_exceptions.ClientResponseError: 503, message='Service Unavailable', "
    "url='http://10.1.2.3:8080/val/val-000.jsonl'",
    "aiohttp.client_exceptions.ClientOSError: [Errno 104] Connection reset by peer",
])
@pytest.mark.parametrize("indent", ["", "    "])
def test_fsspec_url_not_found_raised_from_a_network_error_is_storage(
        tmp_path: Path, cause: str, indent: str) -> None:
    text = (PROGRESS + tb(AIO, exc=cause) + CHAIN
            + tb(USER, FSSPEC, exc="FileNotFoundError: http://10.1.2.3:8080/val/val-000.jsonl"))
    if indent:
        text = "".join(indent + line for line in text.splitlines(keepends=True))
    v = verdict(tmp_path, text)
    assert v.cls == "storage_io", (v.cls, v.evidence)


# ---- a wrapper exception that prints the error it caught inside its message ----

@pytest.mark.parametrize("inner, cls", [
    ("RuntimeError: PytorchStreamWriter failed writing file data/3: file write failed",
     "disk_full"),
    ("OSError: [Errno 122] Disk quota exceeded", "disk_full"),
    ("FileNotFoundError: [Errno 2] No such file or directory: '/ckpt/run7/step900/.metadata'",
     "file_not_found"),
])
def test_dcp_checkpoint_exception_carries_the_cause(tmp_path: Path, inner: str, cls: str) -> None:
    text = (PROGRESS + tb(USER, (f"{SITE}/torch/distributed/checkpoint/utils.py", "all_reduce",
                                 "raise final_result"),
                          exc="torch.distributed.checkpoint.api.CheckpointException: "
                              "CheckpointException ranks:dict_keys([0, 1])")
            + "Traceback (most recent call last): (RANK 0)\n" + DCP_FRAMES + inner + "\n"
            + "Traceback (most recent call last): (RANK 1)\n" + DCP_FRAMES + inner + "\n")
    v = verdict(tmp_path, text)
    assert v.cls == cls, (v.cls, v.evidence)
    assert v.evidence[0].text == inner


def test_ray_task_error_with_deep_remote_frames(tmp_path: Path) -> None:
    remote = frames(*[(f"{SITE}/mylib/io/writer{i}.py", "write", "self._flush()")
                      for i in range(6)])
    text = (PROGRESS + tb(USER, (f"{SITE}/ray/_private/worker.py", "get_objects",
                                 "raise value.as_instanceof_cause()"),
                          exc="ray.exceptions.RayTaskError(OSError): ray::write_shard() "
                              "(pid=4121, ip=10.0.0.5)")
            + remote + "OSError: [Errno 28] No space left on device\n")
    assert verdict(tmp_path, text).cls == "disk_full"


def test_a_wrapper_around_a_generic_error_stays_generic(tmp_path: Path) -> None:
    text = (PROGRESS + tb(USER, exc="torch.distributed.checkpoint.api.CheckpointException: "
                                    "CheckpointException ranks:dict_keys([0])")
            + "Traceback (most recent call last): (RANK 0)\n"
            + frames(USER) + "KeyError: 'optimizer'\n")
    v = verdict(tmp_path, text)
    assert v.cls == "python_exception"


# ---- disk_full on exit 0: a disk-full line at the end of the log ----

@pytest.mark.parametrize("line", [
    "gzip: stdout: No space left on device",
    "tar: shards/part-0003.tar: Cannot write: No space left on device",
    "ERROR writing embeddings cache: [Errno 122] Disk quota exceeded: '/home/u/.cache/emb.pkl'",
    "dd: error writing '/scratch/u/blob.bin': No space left on device",
    # a short write (numpy's tofile, tar) with no errno
    "ERROR saving features: 160000 requested and 32752 written",
    "tar: shards.tar: Wrote only 4096 of 10240 bytes",
])
def test_exit0_with_disk_full_at_the_end_is_a_silent_failure(tmp_path: Path, line: str) -> None:
    v = verdict(tmp_path, PROGRESS + line + "\npacked 0 files\n", exit_code=0)
    assert v.cls == "disk_full" and v.silent_failure


def test_exit0_with_an_early_recovered_enospc_stays_success(tmp_path: Path) -> None:
    text = ("warning: /scratch full ([Errno 28] No space left on device), using /tmp instead\n"
            + "".join(f"epoch 1 step {i} loss {1 / (i + 1):.4f}\n" for i in range(120))
            + "done\n")
    v = verdict(tmp_path, text, exit_code=0)
    assert v.cls == "success" and not v.silent_failure


# ---- checkpoint_corrupt: a model / config / tokenizer file that is there but does not parse ----

@pytest.mark.parametrize("exc", [
    "OSError: It looks like the config file at '/models/llm-7b/preprocessor_config.json' is not "
    "a valid JSON file.",
    "Exception: EOF while parsing an object at line 812 column 0",
    "Exception: trailing characters at line 3 column 5",
    "Exception: key must be a string at line 1 column 2",
])
def test_model_files_that_do_not_parse(tmp_path: Path, exc: str) -> None:
    v = verdict(tmp_path, PROGRESS + tb(USER, exc=exc))
    assert v.cls == "checkpoint_corrupt", (v.cls, v.evidence)


@pytest.mark.parametrize("exc", [
    "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)",
    "json.decoder.JSONDecodeError: Unterminated string starting at: line 4 column 3 (char 86)",
])
def test_json_error_inside_a_model_loader(tmp_path: Path, exc: str) -> None:
    text = PROGRESS + tb(USER, (f"{SITE}/transformers/models/auto/tokenization_auto.py",
                                "from_pretrained", "return tokenizer_class.from_pretrained("),
                         TOK_LOADER, *JSON_FRAMES, exc=exc)
    v = verdict(tmp_path, text)
    assert v.cls == "checkpoint_corrupt", (v.cls, v.evidence)


def test_json_error_reading_data_stays_a_program_error(tmp_path: Path) -> None:
    reader = ("/home/u/proj/data.py", "read_jsonl", "rows.append(json.loads(line))")
    exc = "json.decoder.JSONDecodeError: Expecting ',' delimiter: line 1 column 88 (char 87)"
    text = PROGRESS + tb(USER, reader, *JSON_FRAMES, exc=exc)
    assert verdict(tmp_path, text).cls == "python_exception"


def test_tokenizer_json_of_a_newer_format_is_no_damage(tmp_path: Path) -> None:
    # serde's data errors: the file parsed, this tokenizers version does not know its layout
    exc = ("Exception: data did not match any variant of untagged enum ModelWrapper at line 250373 "
           "column 3")
    assert verdict(tmp_path, PROGRESS + tb(USER, exc=exc)).cls == "python_exception"


@pytest.mark.parametrize("why, cls", [
    ("\tWeightsUnpickler error: Unsupported global: GLOBAL numpy.core.multiarray._reconstruct "
     "was not an allowed global by default. Please use `torch.serialization.add_safe_globals("
     "[_reconstruct])` to allowlist this global if you trust this class/function.",
     "checkpoint_corrupt"),
    ("\tWeightsUnpickler error: Unsupported global: GLOBAL trainer.config.TrainConfig was not an "
     "allowed global by default.", "checkpoint_corrupt"),
    ("Please file an issue with the following so that we can make `weights_only=True` compatible "
     "with your use case: WeightsUnpickler error: \n\nUnsupported operand 60",
     "checkpoint_corrupt"),
])
def test_weights_only_refusal_vs_damage(tmp_path: Path, why: str, cls: str) -> None:
    v = verdict(tmp_path, PROGRESS + tb(USER, TORCH_LOAD, exc=WO + why))
    assert v.cls == cls, (v.cls, v.evidence)


def test_npy_cut_short(tmp_path: Path) -> None:
    read = (f"{SITE}/numpy/lib/_format_impl.py", "read_array", "raise ValueError(")
    exc = ("ValueError: Failed to read all data for array. Expected (600, 256) = 153600 elements, "
           "could only read 84464 elements. (file seems not fully written?)")
    assert verdict(tmp_path, PROGRESS + tb(USER, read, exc=exc)).cls == "checkpoint_corrupt"


# ---- storage errors that reach Python as OSError, in wrappers (held before, but AWS curl) ----

@pytest.mark.parametrize("exc", [
    "RuntimeError: failed to read shard 17: [Errno 5] Input/output error: '/lustre/ds/17.bin'",
    "OSError: [Errno 116] Stale file handle",
    "ValueError: cannot open index: [Errno 121] Remote I/O error: '/mnt/gcs/idx.json'",
    "datasets.builder.DatasetGenerationError: An error occurred while generating the dataset: "
    "[Errno 107] Transport endpoint is not connected",
])
def test_storage_errnos_inside_wrappers(tmp_path: Path, exc: str) -> None:
    text = (TRAINING + "Traceback (most recent call last):\n  File \"train.py\", line 7, in "
            "<module>\n    ds = load(cfg)\n" + exc + "\n")
    assert log_alone(tmp_path, text) == "storage_io"


def test_aws_sdk_curl_errors_then_a_cut_traceback_is_storage(tmp_path: Path) -> None:
    # (was: python_exception) aws-sdk-cpp CurlHttpClient under TensorFlow's S3 filesystem
    text = TRAINING + "".join(
        f"2026-01-09 10:0{i}:11.5{i}: E tensorflow/core/platform/s3/aws_logging.cc:60] Curl "
        "returned error code 28\n" for i in range(3)) + (
        "Traceback (most recent call last):\n  File \"train.py\", line 12, in <module>\n")
    assert log_alone(tmp_path, text) == "storage_io"
