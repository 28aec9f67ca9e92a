"""The family of classify/rules/80-generic-exceptions.yaml: anything else that raised, decided on
the traceback's final "XError: msg" line whatever the class is called (a script's own Abort,
_queue.Empty, an ExceptionGroup member, argparse's usage error, a plain error message without a
traceback, decided weakly), and the safety net of the `hint_*` rules: an exception whose message
says its class in words no specific rule knows takes that class with modest confidence, when
both halves of the family are there (what failed and how: GPU + memory, store + timed out, a
path + does not exist); one half only stays python_exception. An ordinary log line after a cut
traceback is no exception. Every wording is made up for the family or comes from a real Python
process."""

from __future__ import annotations

from pathlib import Path

import pytest
from classifylib import (
    TORCH_PY,
    TRAINING,
    crash,
    log_alone,
    need_torch_venv,
    run,
    run_prog,
    run_py,
    run_verdict,
    verdict,
)

from gpualert_slurm.classify import JobFacts, TaskInput, classify, load_rules

TB = ('step 10 loss 0.41\nTraceback (most recent call last):\n'
      '  File "/opt/app/train.py", line 88, in main\n    run(cfg)\n')


def hint_verdict(tmp_path: Path, last: str):
    log = tmp_path / "run.0.log"
    log.write_text(TB + last + "\n")
    return classify([TaskInput(str(log), rank=0, step="run", exit_code=1)],
                    JobFacts(exit_code=1))


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
    assert (v.cls, v.detail) == ("python_exception", name), (v.cls, v.detail, v.decided_by)
    assert v.decided_by == "log_root" and v.evidence[0].text == line.splitlines()[0]


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
    assert v.decided_by != "log_root" and after not in said, (v.cls, v.detail, v.decided_by)
    assert all(e.text != after for e in v.evidence), v.evidence


def test_a_note_after_the_exception_line_changes_nothing(tmp_path: Path) -> None:
    v = verdict(tmp_path, crash("KeyError: 'label'") + "Note: see docs/labels.md\n")
    assert (v.cls, v.detail) == ("python_exception", "KeyError"), (v.cls, v.detail)


def test_a_logged_traceback_in_a_run_that_went_on_stays_success(tmp_path: Path) -> None:
    text = crash("Abort: shard 7 unreadable, skipped") + "epoch 2 loss 0.19\ntraining done\n"
    assert verdict(tmp_path, text, exit_code=0).cls == "success"


def test_chain_of_generic_exceptions_names_the_last(tmp_path):
    t = run(tmp_path, """
        cfg = {}
        try:
            cfg['optimizer']
        except KeyError:
            raise ValueError('config has no optimizer section')
        """)
    v = run_verdict(t)
    assert (v.cls, v.detail) == ("python_exception", "ValueError")
    assert v.evidence[0].text.startswith("ValueError")


def test_argparse_usage_error(tmp_path):
    t = run(tmp_path, """
        import argparse
        p = argparse.ArgumentParser(prog='train.py')
        p.add_argument('--lr', type=float)
        p.parse_args(['--lr', '1e-3q'])
        """)
    assert t.exit_code == 2
    v = run_verdict(t)
    assert (v.cls, v.detail) == ("python_exception", "argument error")
    assert "invalid float value" in v.evidence[0].text


def test_argparse_missing_required_argument(tmp_path):
    t = run(tmp_path, """
        import argparse
        p = argparse.ArgumentParser(prog='finetune')
        p.add_argument('--data', required=True)
        p.parse_args([])
        """)
    v = run_verdict(t)
    assert (v.cls, v.detail) == ("python_exception", "argument error")


def test_plain_error_message_decides_weakly_and_not_over_a_traceback(tmp_path):
    t = run(tmp_path, "import sys; print('Error: dataset manifest lists 0 shards'); sys.exit(1)")
    v = run_verdict(t)
    assert v.cls == "python_exception" and v.confidence <= 0.5, (v.cls, v.confidence)
    t2 = run(tmp_path, "print('Error: retrying'); open('/no/such/dir/x.bin')", name="1.0.log")
    assert run_verdict(t2).cls == "file_not_found"
    t3 = run(tmp_path, "import os; print('Error: shard 3 slow, retrying', flush=True); "
                       "os.kill(os.getpid(), 9)", name="2.0.log")
    assert run_verdict(t3).cls == "killed"  # weak evidence yields to the signal


# ---- exception names ----

@pytest.mark.parametrize("code,detail", [
    ("import csv, io; csv.field_size_limit(8); list(csv.reader(io.StringIO('y' * 64)))",
     "_csv.Error"),
    ("import sqlite3; sqlite3.connect(':memory:').execute('select * from no_table')",
     "OperationalError"),
    ("import types; m = types.ModuleType('pkg.sub'); "
     "exec('class CustomError(Exception): pass', m.__dict__); raise m.CustomError('bad')",
     "CustomError"),
    ("next(iter([]))", "StopIteration"),
    ("raise ExceptionGroup('loaders failed', [ValueError('a'), TypeError('b')])",
     "ExceptionGroup"),
])
def test_exception_names(tmp_path, code, detail):
    v = run_verdict(run(tmp_path, code))
    assert (v.cls, v.detail) == ("python_exception", detail)


def test_exception_group_member_with_a_class_decides(tmp_path):
    t = run(tmp_path, "raise ExceptionGroup('shards', [ValueError('x'), "
                      "FileNotFoundError(2, 'No such file or directory', 'shard-3.bin')])")
    assert run_verdict(t).cls == "file_not_found"


@pytest.mark.parametrize("line,cls", [
    ("RuntimeError: KV cache needs 12.5 GiB but the GPU has no free memory left", "cuda_oom"),
    ("servelib.errors.EngineError: Insufficient memory on device 0 for 4096 cache blocks",
     "cuda_oom"),
    ("ValueError: not enough memory on cuda:1 to load shard 3", "cuda_oom"),
    ("mylib.StoreError: timed out after 300 s waiting for 7 peers at the barrier",
     "collective_timeout"),
    ("RuntimeError: Rendezvous deadline exceeded while 3 of 4 ranks joined",
     "collective_timeout"),
    ("ValueError: arguments live on different devices (cpu:0 and tpu:1)", "device_mismatch"),
    ("RuntimeError: Device mismatch: weight on cuda:0, input on cpu", "device_mismatch"),
    ("RuntimeError: No CUDA GPUs are available", "cuda_setup"),
    ("AppError: unable to initialize the GPU runtime: no devices visible", "cuda_setup"),
    ("ValueError: checkpoint /scratch/run7/ckpt_0400.pt does not exist", "file_not_found"),
    ("loaders.LoadError: could not find data/val.parquet", "file_not_found"),
    ("OSError: https://store.example:9000/bucket/shard-7.tar: server disconnected mid-read",
     "storage_io"),
    ("fetch.FetchError: remote endpoint connection reset while reading part 12",
     "storage_io"),
])
def test_a_class_in_the_exceptions_own_words(tmp_path: Path, line: str, cls: str) -> None:
    v = hint_verdict(tmp_path, line)
    assert v.cls == cls, v.to_json()


def test_hints_are_modest_and_rank_below_every_specific_rule() -> None:
    rules = {r.id: r for r in load_rules(use_cache=False, site=False).rules}
    hints = [r for r in rules.values() if r.id.startswith("hint_")]
    assert len(hints) >= 6
    generic = rules["python_exception"].priority
    for h in hints:
        assert h.role == "root" and h.confidence is not None and h.confidence <= 0.6, h.id
        assert h.priority == generic + 1, h.id


@pytest.mark.parametrize("line", [
    "RuntimeError: cache blocks must be a multiple of 16",          # GPU words, no memory words
    "ValueError: not enough memory budget given in the config",     # memory, no device words
    "TimeoutError: the evaluation callback timed out",              # timeout, no store/rank
    "KeyError: 'device'",
    "ValueError: option --device does not exist",                   # no path
    "ValueError: unknown scheduler 'cosine2'",
    "RuntimeError: the CUDA graph was captured with a different batch size",
])
def test_one_half_of_a_family_stays_a_python_exception(tmp_path: Path, line: str) -> None:
    assert hint_verdict(tmp_path, line).cls == "python_exception"


# ---- a traceback whose last frames load or save a file, yet the program's own error ----
# (the cut tracebacks those frames decide: tests/test_classify_files_and_dataloaders.py)

def test_a_generic_exception_from_pickle_loads_stays_generic(tmp_path: Path) -> None:
    # pickle.loads is also multiprocessing's IPC: its frame does not make a file unreadable
    text = (TRAINING + "Traceback (most recent call last):\n  File \"worker.py\", line 40, in "
            "recv\n    msg = pickle.loads(buf)\n  File \"worker.py\", line 12, in __setstate__\n"
            "    raise ValueError('bad config')\nValueError: bad config\n")
    assert log_alone(tmp_path, text) == "python_exception"


def test_an_object_torch_save_cannot_pickle_is_the_programs(tmp_path: Path) -> None:
    need_torch_venv()
    # the same frames with pickle's own error: the program's, not the storage's
    text = run_prog(tmp_path, TORCH_PY, """\
        import torch
        torch.save({"fn": lambda x: x}, "ckpt.pt")
    """)
    assert "Can't pickle" in text
    assert log_alone(tmp_path, TRAINING + text) == "python_exception"
