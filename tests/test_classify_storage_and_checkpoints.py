"""File, storage and checkpoint wording families that held-out set 5 showed unknown to the rules
(corpus/holdout5/misses-once.txt): remote-storage client errors (aiohttp / fsspec / botocore)
and fsspec's FileNotFoundError(url) raised from them, a wrapper exception that prints the
error it caught inside its message (DCP's CheckpointException, Ray's RayTaskError), a disk-full
line at the end of a log that exited 0, libraries that say a path "does not exist" in their own
words, model/config/tokenizer files that exist but do not parse, sqlite's "unable to open
database file". Each family is tested with wordings other than holdout5's, and with a benign
mention that must stay what it was. Pure logic over small written logs."""

from __future__ import annotations

from pathlib import Path

import pytest
from classifylib import verdict

SITE = "/opt/conda/envs/train/lib/python3.11/site-packages"
PROGRESS = "".join(f"step {i} loss {2 / (i + 1):.4f}\n" for i in range(8))
USER = ("/home/u/proj/train.py", "main", "run(cfg)")
CHAIN = "\nThe above exception was the direct cause of the following exception:\n\n"


def frames(*fr: tuple[str, str, str]) -> str:
    out = []
    for path, func, src in fr:
        out += [f'  File "{path}", line {len(out) * 7 + 11}, in {func}', f"    {src}"]
    return "\n".join(out) + "\n"


def tb(*fr: tuple[str, str, str], exc: str) -> str:
    return "Traceback (most recent call last):\n" + frames(*fr) + exc + "\n"


# ---- storage_io: remote object / HTTP storage client errors ----

AIO = (f"{SITE}/aiohttp/client.py", "_request", "resp = await handler(req)")
FSSPEC = (f"{SITE}/fsspec/implementations/http.py", "_info",
          "raise FileNotFoundError(url) from exc")


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


# ---- a wrapper exception that prints the error it caught inside its message ----

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
    assert v.evidence[0]["text"] == inner


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


# ---- checkpoint_corrupt: a model / config / tokenizer file that is there but does not parse ----

TOK_LOADER = (f"{SITE}/transformers/tokenization_utils_base.py", "_from_pretrained",
              "with open(tokenizer_file, encoding=\"utf-8\") as f: tokenizer_json = json.load(f)")
JSON_FRAMES = (("/usr/lib/python3.11/json/__init__.py", "loads",
                "return _default_decoder.decode(s)"),
               ("/usr/lib/python3.11/json/decoder.py", "raw_decode",
                "raise JSONDecodeError(\"Expecting value\", s, err.value) from None"))


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


# ---- torch weights_only: a refused global and an unreadable file are both a checkpoint that
# cannot be loaded (f7m- relabelled the refusal checkpoint_corrupt; its detail says the file is
# intact, tests/test_classify_loader_timeouts_and_checkpoint_loads.py) ----

TORCH_LOAD = (f"{SITE}/torch/serialization.py", "load",
              "raise pickle.UnpicklingError(_get_wo_message(str(e))) from None")
WO = ("_pickle.UnpicklingError: Weights only load failed. This file can still be loaded, to do "
      "so you have two options, do those steps only if you trust the source of the checkpoint.\n"
      "\t(1) In PyTorch 2.6, we changed the default value of the `weights_only` argument in "
      "`torch.load` from `False` to `True`. Re-running `torch.load` with `weights_only` set to "
      "`False` will likely succeed.\n")


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
