"""The family of classify/rules/76-command-line-tools.yaml: command-line tools' own error words and
readers that say a file is cut short: lz4 (programs/lz4io.c), Info-ZIP unzip (process.c,
extract.c), GNU wget (src/http.c, src/retr.c), curl's CURLcode messages, gawk (msg.c, eval.c)
and jq (src/main.c); msgpack's unpacker, SciPy's MAT-file reader, numpy's np.load. Wordings
written here from each tool's source and from runs of the tools; benign mentions that must stay
what they were. Pure logic over small written logs."""

from __future__ import annotations

from pathlib import Path

import pytest
from classifylib import verdict


@pytest.mark.parametrize(("text", "cls", "code"), [
    # lz4: a cut or damaged stream is a damaged file; a write error the full disk's
    ("decompressing shard 3\nError 68 : Unfinished stream \n", "checkpoint_corrupt", 68),
    ("Error 44 : Unrecognized header : file cannot be decoded \n", "checkpoint_corrupt", 44),
    ("Error 66 : Decompression error : ERROR_decompressionFailed \n", "checkpoint_corrupt", 66),
    ("Error 74 : Write error : cannot write compressed block \n", "disk_full", 74),
    # unzip
    ("unzip:  cannot find or open /scratch/run7/shards.zip, /scratch/run7/shards.zip.zip or "
     "/scratch/run7/shards.zip.ZIP.\n", "file_not_found", 9),
    ("Archive:  emb.zip\nerror [emb.zip]:  missing 31744 bytes in zipfile\n  (attempting to process"
     " anyway)\nerror: invalid zip file with overlapped components (possible zip bomb)\n",
     "checkpoint_corrupt", 12),
    ("  inflating: out/w.bin\nout/w.bin         bad CRC 1c0ffee5  (should be 9a8b7c6d)\n",
     "checkpoint_corrupt", 2),
    ("/scratch/x/part-0003.parquet:  write error (disk full?).  Continue? (y/n/^C) \n"
     "warning:  /scratch/x/part-0003.parquet is probably truncated\n", "disk_full", 50),
    # wget / curl
    ("--2026-01-04 10:00:01--  https://store.example/ckpt/last.pt\nHTTP request sent, awaiting "
     "response... 200 OK\n2026-01-04 10:00:09 (88.1 MB/s) - Read error at byte 734003200/1468006400"
     " (Connection timed out). Giving up.\n\n", "storage_io", 4),
    ("Connecting to data.example (data.example)|10.1.2.3|:443... connected.\n"
     "Unable to establish SSL connection.\n", "storage_io", 4),
    ("HTTP request sent, awaiting response... 503 Service Unavailable\n"
     "2026-01-04 10:00:01 ERROR 503: Service Unavailable.\n", "storage_io", 8),
    ("HTTP request sent, awaiting response... 404 Not Found\n"
     "2026-01-04 10:00:01 ERROR 404: Not Found.\n\n", "file_not_found", 8),
    ("curl: (18) transfer closed with 1047552 bytes remaining to read\n", "storage_io", 18),
    ("curl: (56) Recv failure: Connection reset by peer\n", "storage_io", 56),
    ("curl: (28) Operation timed out after 30001 milliseconds with 0 out of 0 bytes received\n",
     "storage_io", 28),
    ("curl: (22) The requested URL returned error: 404\n", "file_not_found", 22),
    # gawk / jq: the step's program failed on its input; a missing file stays a missing file
    ("gawk: prep/split.awk:14: (FILENAME=train.tsv FNR=208) fatal: division by zero attempted "
     "in `%'\n",
     "python_exception", 2),
    ("gawk: cmd. line:3: (FILENAME=- FNR=1) fatal: attempt to use array `seen' in a scalar "
     "context\n",
     "python_exception", 2),
    ("gawk: fatal: cannot open file `/data/manifest.tsv' for reading: No such file or directory\n",
     "file_not_found", 2),
    ("gawk: prep/metrics.awk:1: fatal: load_ext: cannot open library `/usr/lib/gawk/time.so': "
     "No such file or directory\n", "import_error", 2),
    ("gawk: cmd. line:1: error: cannot open shared library `ordchr' for reading: No such file or "
     "directory\n", "import_error", 1),
    ("jq: error (at conf/train.json:12): null (null) and number (1) cannot be added\n",
     "python_exception", 5),
    ("jq: error (at <stdin>:0): Cannot iterate over null (null)\n", "python_exception", 5),
    ("parse error: Expected separator between values at line 3, column 9\n", "python_exception", 2),
    ("jq: error: Could not open file conf/missing.json: No such file or directory\n",
     "file_not_found", 2),
])
def test_tool_error_words(tmp_path: Path, text: str, cls: str, code: int) -> None:
    v = verdict(tmp_path, text, exit_code=code)
    assert v.cls == cls, (v.cls, v.detail, v.evidence)


@pytest.mark.parametrize("text", [
    "Traceback (most recent call last):\n  File \"replay.py\", line 9, in <module>\n"
    "    state = msgpack.unpackb(blob)\nValueError: Unpack failed: incomplete input\n",
    "Traceback (most recent call last):\n  File \"replay.py\", line 9, in <module>\n"
    "    state = msgpack.unpackb(blob)\n"
    "msgpack.exceptions.ExtraData: unpack(b) received extra data.\n",
    "Traceback (most recent call last):\n  File \"stream.py\", line 4, in <module>\n"
    "    rec = unpacker.unpack()\nmsgpack.exceptions.OutOfData\n",
    "Traceback (most recent call last):\n  File \"/opt/venv/lib/python3.11/site-packages/scipy/io/"
    "matlab/_mio5.py\", line 232, in get_variables\n    res = self.read_var_array(hdr, process)\n"
    "OSError: could not read bytes\n",
    "scipy.io.matlab._miobase.MatReadError: Mat file appears to be truncated\n",
    "scipy.io.matlab._miobase.MatReadError: Mat file appears to be empty\n",
    "ValueError: Not enough bytes to read matrix 'emb'; is this a badly-formed file? Consider "
    "listing matrices with `whosmat` and loading named matrices with `variable_names` kwarg to "
    "`loadmat`\n",
    "Traceback (most recent call last):\n  File \"eval.py\", line 3, in <module>\n"
    "    x = np.load('feats.npy', allow_pickle=True)\nEOFError: No data left in file\n",
])
def test_readers_on_a_cut_file(tmp_path: Path, text: str) -> None:
    v = verdict(tmp_path, text)
    assert v.cls == "checkpoint_corrupt", (v.cls, v.detail, v.evidence)


@pytest.mark.parametrize(("text", "cls", "code"), [
    # a generic ValueError stays a program error
    ("Traceback (most recent call last):\n  File \"t.py\", line 2, in <module>\n"
     "ValueError: cannot reshape array of size 625 into shape (100,100)\n", "python_exception", 1),
    # benign mentions in a job that went on and ended well
    ("retrying download: curl: (56) Recv failure: Connection reset by peer\nattempt 2 ok\n"
     "Error 68 : Unfinished stream handled by re-download\nepoch 3 done\ntraining complete\n",
     "success", 0),
    ("awk: cmd. line:1: warning: regexp escape sequence `\\.' is not a known regexp operator\n",
     "unknown", 1),
])
def test_benign_and_generic_stay(tmp_path: Path, text: str, cls: str, code: int) -> None:
    v = verdict(tmp_path, text, exit_code=code)
    assert v.cls == cls, (v.cls, v.detail, v.evidence)


def test_unzip_disk_full_at_the_end_of_an_exit0_log_is_a_silent_failure(tmp_path: Path) -> None:
    text = ("staging tokenizer\n/scratch/tok/merges.txt:  write error (disk full?).  Continue? "
            "(y/n/^C) \nwarning:  /scratch/tok/merges.txt is probably truncated\nstaged\n")
    v = verdict(tmp_path, text, exit_code=0)
    assert (v.cls, v.silent_failure) == ("disk_full", True), (v.cls, v.detail)


def test_unzip_disk_full_early_in_a_job_that_went_on_stays_success(tmp_path: Path) -> None:
    text = ("/scratch/a.bin:  write error (disk full?).  Continue? (y/n/^C) \n"
            "cleaned scratch, retrying\n" + "".join(f"epoch {i} loss 0.{i}\n" for i in range(80))
            + "training complete\n")
    v = verdict(tmp_path, text, exit_code=0)
    assert v.cls == "success", (v.cls, v.detail)
