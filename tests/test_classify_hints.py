"""The safety net of rules.yaml's `hint_*` rules: an exception whose message says its class in
words no specific rule knows (a library's own re-wording) takes that class with modest
confidence, when both halves of the family are there (what failed and how: GPU + memory,
store + timed out, a path + does not exist). Every wording here is made up for the family, not
taken from a corpus case; the negatives keep one half only and stay python_exception."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpualert_slurm.classify import JobFacts, TaskInput, classify, load_rules

TB = ('step 10 loss 0.41\nTraceback (most recent call last):\n'
      '  File "/opt/app/train.py", line 88, in main\n    run(cfg)\n')


def verdict(tmp_path: Path, last: str):
    log = tmp_path / "run.0.log"
    log.write_text(TB + last + "\n")
    return classify([TaskInput(str(log), rank=0, step="run", exit_code=1)],
                    JobFacts(exit_code=1))


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
    v = verdict(tmp_path, line)
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
    assert verdict(tmp_path, line).cls == "python_exception"
