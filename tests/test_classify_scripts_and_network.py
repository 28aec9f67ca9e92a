"""The family of classify/rules/74-scripts-and-network.yaml: scripts and runtime errors read by
their message. Perl's own errors (pod/perldiag.pod), a Rust panic whose words say more than "a
panic" (a stack overflow is a native crash, a finite check on the loss is a divergence), and
network reads failing in Node.js, Go and Rust (storage_io, as Python's). Wordings written from
each runtime's documented format; benign mentions that must stay what they were. Pure logic over
small written logs."""

from __future__ import annotations

from pathlib import Path

import pytest
from classifylib import verdict

INC = ("(@INC contains: /etc/perl /usr/local/lib/x86_64-linux-gnu/perl/5.36.0 /usr/share/perl5 "
       "/usr/lib/x86_64-linux-gnu/perl/5.36 /usr/share/perl/5.36 /usr/local/lib/site_perl)")

NODE_TAIL = "\nNode.js v20.11.1\n"


# ---- Perl ----

@pytest.mark.parametrize("text", [
    "Can't locate Bio/DB/Fasta.pm in @INC (you may need to install the Bio::DB::Fasta module) "
    + INC + " at pipeline/index.pl line 7.\nBEGIN failed--compilation aborted at pipeline/index.pl"
    " line 7.\n",
    "sorting reads\nCan't locate List/MoreUtils.pm in @INC (you may need to install the "
    "List::MoreUtils module) " + INC + " at (eval 4) line 1.\n",
    "Can't locate loadable object for module DBD::SQLite in @INC (@INC contains: /opt/perl5) "
    "at tools/merge.pl line 12.\nCompilation failed in require at tools/merge.pl line 12.\n",
])
def test_perl_missing_module_is_an_import_error(tmp_path: Path, text: str) -> None:
    v = verdict(tmp_path, text, exit_code=2)
    assert v.cls == "import_error", (v.cls, v.detail)


@pytest.mark.parametrize("text", [
    "hashing 3000000 k-mers\nOut of memory!\n",
    "Out of memory during request for 1073741848 bytes, total sbrk() is 2013265920 bytes!\n",
    'Out of memory during "large" request for 268439552 bytes, total sbrk() is 536903680 bytes at '
    "count.pl line 44.\n",
    "Out of memory during array extend at -e line 1.\n",
])
def test_perl_out_of_memory_is_host_memory(tmp_path: Path, text: str) -> None:
    v = verdict(tmp_path, text, exit_code=1)
    assert v.cls == "host_oom", (v.cls, v.detail)


@pytest.mark.parametrize("line", [
    "Illegal division by zero at scripts/norm.pl line 88.",
    "Illegal modulus zero at shard.pl line 12, <$manifest> line 40.",
    'Can\'t call method "print" on an undefined value at export.pl line 31.',
    'Can\'t call method "fetchrow_array" on unblessed reference at db.pl line 9.',
    'Can\'t locate object method "new" via package "Text::CSV" (perhaps you forgot to load '
    '"Text::CSV"?) at csv2tsv.pl line 5.',
    "Not an ARRAY reference at lib/Pipeline/Stage.pm line 140.",
    "Can't use an undefined value as a HASH reference at merge.pl line 23.",
    'Can\'t use string ("12") as an ARRAY ref while "strict refs" in use at agg.pl line 51.',
    "Undefined subroutine &main::load_config called at run.pl line 3.",
    "Modification of a read-only value attempted at fix.pl line 17.",
])
def test_perl_runtime_error_is_the_programs_exception(tmp_path: Path, line: str) -> None:
    v = verdict(tmp_path, "merging 12 label files\n" + line + "\n", exit_code=255)
    assert (v.cls, v.detail) == ("python_exception", line), (v.cls, v.detail)


@pytest.mark.parametrize("line", [
    "no samples left after QC filter at bin/qc.pl line 210.",
    "bad manifest row 'x\t3': expected 3 columns at bin/manifest.pl line 49, <$fh> line 2.",
    "config has no 'reference' key at -e line 1.",
    "Died at tools/split.pl line 8.",
])
def test_perl_die_says_the_program_stopped(tmp_path: Path, line: str) -> None:
    v = verdict(tmp_path, "reading samples\n" + line + "\n", exit_code=255)
    assert v.cls == "python_exception", (v.cls, v.detail)


def test_perl_missing_input_is_file_not_found(tmp_path: Path) -> None:
    v = verdict(tmp_path, "Can't open /data/cohort/samples.tsv: No such file or directory at "
                "bin/qc.pl line 12.\n", exit_code=2)
    assert v.cls == "file_not_found", (v.cls, v.detail)


def test_perl_warnings_are_not_a_die(tmp_path: Path) -> None:
    # (W) warnings look like a die; a job that exits 3 after only warnings is unknown, one
    # killed after them killed, one that exits 0 a success
    warns = ("Use of uninitialized value $n in addition (+) at agg.pl line 12, <$in> line 4.\n"
             'Argument "n/a" isn\'t numeric in numeric gt (>) at agg.pl line 19.\n'
             "Deep recursion on subroutine \"main::walk\" at tree.pl line 30.\n")
    assert verdict(tmp_path, warns, exit_code=3).cls == "unknown"
    assert verdict(tmp_path, warns + "some work\n", exit_code=None, signal=9).cls == "killed"
    assert verdict(tmp_path, warns + "done\n", exit_code=0).cls == "success"
    # a plain die-shaped line yields to the signal that ended the job
    assert verdict(tmp_path, "no shards at x.pl line 3.\n", exit_code=None,
                   signal=15).cls == "killed"


# ---- Rust panics, read by their message ----

@pytest.mark.parametrize("text", [
    "\nthread 'main' has overflowed its stack\nfatal runtime error: stack overflow\n",
    "\nthread 'rayon-worker-3' (40112) has overflowed its stack\nfatal runtime error: stack "
    "overflow, aborting\n",
    "\nthread '<unnamed>' has overflowed its stack\nfatal runtime error: stack overflow\n",
])
def test_rust_stack_overflow_is_a_native_crash(tmp_path: Path, text: str) -> None:
    v = verdict(tmp_path, "building the suffix tree\n" + text, exit_code=None, signal=6)
    assert v.cls == "segfault", (v.cls, v.detail)


@pytest.mark.parametrize("text", [
    "thread 'main' panicked at 'assertion failed: loss.is_finite()', src/train.rs:88:9\n",
    "thread 'main' (5120) panicked at src/train.rs:88:9:\nassertion failed: !grad_norm.is_nan()\n",
    "thread 'trainer' panicked at src/sgd.rs:41:13:\nloss diverged after 300 steps\n",
    "thread 'main' panicked at 'gradient norm is inf at step 6', src/main.rs:23:46\n",
    "thread 'main' panicked at src/opt.rs:12:5:\nassertion failed: f64::is_finite(loss)\n",
])
def test_rust_panic_on_a_finite_check_is_divergence(tmp_path: Path, text: str) -> None:
    v = verdict(tmp_path, "step 10 w 4.1e12\n" + text
                + "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n",
                exit_code=101)
    assert v.cls == "nan_divergence", (v.cls, v.detail)


@pytest.mark.parametrize("text", [
    # C's assert, Python's assert statement (its source line in the traceback), a JS error
    "train: train.cpp:88: int main(): Assertion `std::isfinite(loss)' failed.\n",
    'Traceback (most recent call last):\n  File "train.py", line 40, in <module>\n'
    "    assert torch.isfinite(loss).all(), step\nAssertionError: 120\n",
    "Error: gradient diverged at step 12 (norm NaN)\n    at train (/app/train.js:40:11)\n",
])
def test_finite_check_in_other_runtimes_is_divergence(tmp_path: Path, text: str) -> None:
    v = verdict(tmp_path, "step 10\n" + text, exit_code=1)
    assert v.cls == "nan_divergence", (v.cls, v.detail)


@pytest.mark.parametrize("text", [
    "thread 'main' panicked at 'index out of bounds: the len is 3 but the index is 7', "
    "src/a.rs:4:5\n",
    "ValueError: Input X contains NaN.\n",  # bad input data, not a divergence
    "thread 'main' panicked at src/cfg.rs:9:5:\nassertion failed: cfg.lr.is_sign_positive()\n",
])
def test_other_panics_stay_the_programs_exception(tmp_path: Path, text: str) -> None:
    v = verdict(tmp_path, text, exit_code=101)
    assert v.cls == "python_exception", (v.cls, v.detail)


def test_divergence_guard_that_recovered_is_not_the_cause(tmp_path: Path) -> None:
    # the loop reloaded a checkpoint after "loss diverged"; the job died of something else
    text = ("step 300 loss diverged, reloading checkpoint step-250 and lowering the lr\n"
            "step 310 loss 2.1\nIndexError: list index out of range\n")
    v = verdict(tmp_path, text, exit_code=1)
    assert v.cls == "python_exception", (v.cls, v.detail)


def test_loss_divergence_monitor_mentions_stay_success(tmp_path: Path) -> None:
    text = ("divergence check: loss diverged = false\nassert_finite: enabled\n"
            "step 100 loss 0.31\ndone\n")
    assert verdict(tmp_path, text, exit_code=0).cls == "success"


# ---- network reads failing: Node.js and Go ----

@pytest.mark.parametrize("text", [
    "TypeError: fetch failed\n    at node:internal/deps/undici/undici:13185:13 {\n"
    "  [cause]: ConnectTimeoutError: Connect Timeout Error (attempted address: s3.local:443, "
    "timeout: 10000ms)\n      at onConnectTimeout (node:internal/deps/undici/undici:2331:28) {\n"
    "    code: 'UND_ERR_CONNECT_TIMEOUT'\n  }\n}\n",
    "TypeError: fetch failed\n    at async main (/job/dl.mjs:12:15) {\n  [cause]: SocketError: "
    "other side closed\n      at Socket.onSocketEnd (node:internal/deps/undici/undici:8900:26) {\n"
    "    code: 'UND_ERR_SOCKET'\n  }\n}\n",
    "Error: connect ETIMEDOUT 10.12.0.4:9000\n    at TCPConnectWrap.afterConnect [as oncomplete] "
    "(node:net:1555:16) {\n  errno: -110,\n  code: 'ETIMEDOUT'\n}\n",
    "Error: getaddrinfo ENOTFOUND minio.storage.svc\n    at GetAddrInfoReqWrap.onlookup "
    "(node:dns:107:26)\n",
    "Error: read ECONNRESET\n    at TLSWrap.onStreamRead "
    "(node:internal/stream_base_commons:217:20)\n",
    "Error: socket hang up\n    at connResetException (node:internal/errors:720:14)\n",
    "DOMException [TimeoutError]: The operation was aborted due to timeout\n"
    "    at new DOMException (node:internal/per_context/domexception:53:5)\n",
    "HeadersTimeoutError: Headers Timeout Error\n    at Timeout.onParserTimeout "
    "(undici/lib/client.js:1000:28) {\n  code: 'UND_ERR_HEADERS_TIMEOUT'\n}\n",
])
def test_node_network_failure_is_storage_io(tmp_path: Path, text: str) -> None:
    v = verdict(tmp_path, "GET https://s3.local/bucket/shard-0009.tar\n" + text + NODE_TAIL)
    assert v.cls == "storage_io", (v.cls, v.detail)


@pytest.mark.parametrize("text", [
    'panic: Get "http://10.0.0.5:9000/shard-17.tar": dial tcp 10.0.0.5:9000: i/o timeout\n\n'
    "goroutine 1 [running]:\nmain.main()\n\t/src/dl/main.go:22 +0x1d\n",
    "2024/05/02 10:11:12 upload: write tcp 10.0.0.2:40112->10.0.0.5:9000: write: broken pipe\n",
    '2024/05/02 10:11:12 Get "https://hub.local/v2/": dial tcp: lookup hub.local on 127.0.0.53:53:'
    " no such host\n",
    'panic: Get "http://x/y": context deadline exceeded (Client.Timeout exceeded while awaiting '
    "headers)\n\ngoroutine 1 [running]:\n",
    "2024/05/02 10:11:12 read tcp 10.0.0.2:5512->10.0.0.5:9000: read: connection reset by peer\n",
])
def test_go_network_failure_is_storage_io(tmp_path: Path, text: str) -> None:
    v = verdict(tmp_path, "fetching shards\n" + text, exit_code=1)
    assert v.cls == "storage_io", (v.cls, v.detail)


@pytest.mark.parametrize("text", [
    "thread 'main' panicked at 'read index: Os { code: 104, kind: ConnectionReset, message: "
    '"Connection reset by peer" }\', src/fetch.rs:53:37\n',
    "thread 'main' (771) panicked at src/fetch.rs:20:10:\nupload: reqwest::Error { kind: Request, "
    'source: hyper::Error(Connect, ConnectError("tcp connect error", Os { code: 111, kind: '
    'ConnectionRefused, message: "Connection refused" })) }\n',
    "Error: Connection timed out (os error 110)\n",
    "thread 'main' panicked at src/fetch.rs:9:5:\nread shard: Kind(TimedOut)\n",
])
def test_rust_network_failure_is_storage_io(tmp_path: Path, text: str) -> None:
    v = verdict(tmp_path, "fetching shard index\n" + text, exit_code=101)
    assert v.cls == "storage_io", (v.cls, v.detail)


def test_network_words_in_a_job_that_went_on_stay_success(tmp_path: Path) -> None:
    text = ("Error: read ECONNRESET\n    at TCP.onStreamRead "
            "(node:internal/stream_base_commons:217:20)\nattempt 1 failed, retrying in 2 s\n"
            "attempt 2: 4096 bytes\nexported 12 shards, 0 errors\n")
    assert verdict(tmp_path, text, exit_code=0).cls == "success"
