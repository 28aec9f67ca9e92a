"""Classifier engine: real failing processes, ordering, multi-rank attribution, robustness."""

from __future__ import annotations

import dataclasses
import os
import random
import signal
from pathlib import Path

import pytest
from classifylib import run_py

from gpualert_slurm.classify import JobFacts, TaskInput, classify, load_rules
from gpualert_slurm.classify.rules import RuleError
from gpualert_slurm.classify.scan import scan_file

FIX = Path(__file__).parent / "fixtures" / "classify"


def job_of(t: TaskInput, **kw) -> JobFacts:
    return JobFacts(exit_code=kw.pop("exit_code", t.exit_code if t.exit_code is not None
                                    else 128 + (t.signal or 0)), signal=t.signal, **kw)


REAL = [
    ("import gpualert_no_such_module_xyz", "import_error", None),
    ("open('/nonexistent/dir/data.csv')", "file_not_found", None),
    ("raise PermissionError(13, 'Permission denied', '/data/ckpt')", "permission_denied", None),
    ("open('/dev/full', 'w').write('x' * 65536)", "disk_full", None),
    ("import pickle; pickle.loads(b'xbroken-checkpoint')", "checkpoint_corrupt", None),
    ("bytearray(1 << 62)", "host_oom", None),
    ("""
     for step in range(3): print(f'step {step} loss=0.4')
     raise ValueError('loss is nan at step 3')""", "nan_divergence", None),
    ("""
     import warnings
     warnings.warn('error-prone option is deprecated')
     d = {}
     d['missing']""", "python_exception", "KeyError"),
    ("import ctypes; ctypes.string_at(0)", "segfault", None),
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "killed", None),
    ("import os; os.abort()", "segfault", None),
]


@pytest.mark.parametrize("code,expected,detail", REAL, ids=[r[1] + str(i)
                                                             for i, r in enumerate(REAL)])
def test_real_failing_process_is_classified(tmp_path, code, expected, detail):
    t = run_py(tmp_path, code)
    assert t.exit_code != 0
    v = classify([t], job_of(t))
    assert v.cls == expected, (v.cls, v.detail, Path(t.path).read_text()[-500:])
    if detail:
        assert v.detail == detail
    assert v.hint and v.domain


def test_segfault_with_faulthandler_traceback_text(tmp_path):
    t = run_py(tmp_path, "import ctypes; ctypes.string_at(0)", "-X", "faulthandler")
    assert t.signal == signal.SIGSEGV
    v = classify([t], job_of(t))
    assert v.cls == "segfault"
    assert any("Segmentation fault" in e.text for e in v.evidence)


def test_warnings_mentioning_error_with_exit_0_is_success(tmp_path):
    t = run_py(tmp_path, """
        import warnings, sys
        for i in range(5):
            warnings.warn(f'error rate {i} above threshold; UserWarning only')
            print(f'step {i} loss=0.1 (0 errors)', file=sys.stderr)
        print('done')""")
    assert t.exit_code == 0
    assert "error" in Path(t.path).read_text()
    v = classify([t], JobFacts(exit_code=0, slurm_state="COMPLETED"))
    assert v.cls == "success"
    assert v.domain == "none"


@pytest.mark.parametrize("name,expected", [
    ("cuda_oom_then_nccl.log", "cuda_oom"),
    ("cuda_illegal.log", "cuda_error"),
    ("device_assert.log", "cuda_device_assert"),
    ("cuda_setup.log", "cuda_setup"),
    ("collective_timeout.log", "collective_timeout"),
    ("collective_gloo.log", "collective_timeout"),
    ("device_mismatch.log", "device_mismatch"),
    ("dataloader.log", "dataloader_worker"),
    ("storage_io.log", "storage_io"),
    ("nccl_rank0.log", "nccl_error"),
    ("time_limit.log", "time_limit"),
    ("user_cancel.log", "cancelled"),
    ("xid_kernel.log", "gpu_hardware"),  # the driver's words also count in a task log
])
def test_fixture_log_classes(name, expected):
    v = classify([TaskInput(str(FIX / name))], JobFacts(exit_code=1))
    assert v.cls == expected, (v.cls, v.detail)
    assert v.evidence and all(e.file.endswith(name) for e in v.evidence)


def test_every_class_has_a_domain_and_hint_and_rules_reach_most_classes():
    rs = load_rules()
    table = {"cuda_oom", "host_oom", "gpu_hardware", "cuda_error", "cuda_device_assert",
             "cuda_setup", "nccl_error", "collective_timeout", "nan_divergence", "import_error",
             "file_not_found", "permission_denied", "disk_full", "storage_io",
             "checkpoint_corrupt", "segfault", "dataloader_worker", "device_mismatch",
             "python_exception", "time_limit", "preempted", "cancelled", "node_failure", "hang",
             "killed", "success", "unknown"}
    assert set(rs.classes) == table
    assert all(c.hint and c.domain for c in rs.classes.values())
    by_text = {r.cls for r in rs.rules if r.role == "root" and r.source in ("log", "kernel")}
    # the rest are decided by facts: silence, exit status, Slurm state (hang also by a stack
    # dump taken of a stuck process: rule hang_stack_dump)
    assert table - by_text == {"killed", "success", "unknown"}
    by_facts = {r.cls for r in rs.rules if r.source in ("slurm", "exit")}
    # (the shell's exit codes 126 and 127: not executable, not found)
    assert by_facts == {"time_limit", "preempted", "cancelled", "node_failure", "host_oom",
                        "segfault", "killed", "permission_denied", "file_not_found"}


def test_first_root_cause_wins_over_later_symptoms():
    v = classify([TaskInput(str(FIX / "cuda_oom_then_nccl.log"))], JobFacts(exit_code=1))
    assert v.cls == "cuda_oom"
    assert v.evidence[0].line == 8
    assert "CUDA out of memory" in v.evidence[0].text
    # the later NCCL / CUDA errors are reported as cascades of the same rank
    assert {c.cls for c in v.cascades} & {"nccl_error", "cuda_error"}


def test_exception_line_specific_class_beats_generic(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\n"
                   "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert classify([TaskInput(str(log))], JobFacts(exit_code=1)).cls == "cuda_oom"
    log.write_text("Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\n"
                   "RuntimeError: Error(s) in loading state_dict for Net\n")
    v = classify([TaskInput(str(log))], JobFacts(exit_code=1))
    assert (v.cls, v.detail) == ("python_exception", "RuntimeError")


@pytest.mark.parametrize("facts,expected", [
    (dict(slurm_state="TIMEOUT", exit_code=0, signal=15), "time_limit"),
    (dict(slurm_state="PREEMPTED"), "preempted"),
    (dict(slurm_state="CANCELLED", signal=15), "cancelled"),
    (dict(slurm_state="NODE_FAIL"), "node_failure"),
    (dict(slurm_state="OUT_OF_MEMORY", exit_code=0, signal=9), "host_oom"),
    (dict(signal=9), "killed"),
    (dict(exit_code=139), "segfault"),
    (dict(exit_code=3), "unknown"),
    (dict(exit_code=0), "success"),
    (dict(slurm_state="TIMEOUT", hang_threshold_s=600.0, silence_s=3000.0), "hang"),
    (dict(slurm_state="TIMEOUT", hang_threshold_s=600.0, silence_s=10.0), "time_limit"),
])
def test_facts_decide_when_the_log_is_empty(tmp_path, facts, expected):
    log = tmp_path / "batch.0.log"
    log.write_bytes(b"")
    v = classify([TaskInput(str(log), rank=0, step="batch")], JobFacts(**facts))
    assert v.cls == expected, (v.cls, v.detail)


def test_kernel_log_evidence(tmp_path):
    log = tmp_path / "0.0.log"
    log.write_text("step 1 loss=0.3\n")
    hw = classify([TaskInput(str(log))], JobFacts(signal=6, kernel_log=str(FIX / "xid_kernel.log")))
    assert hw.cls == "gpu_hardware" and hw.domain == "infrastructure"
    assert "Xid" in hw.evidence[0].text
    oom = classify([TaskInput(str(log))],
                   JobFacts(signal=9, kernel_log=str(FIX / "kernel_oom.log")))
    assert oom.cls == "host_oom"


def test_nvml_ecc_counter_rise_is_hardware(tmp_path):
    log = tmp_path / "0.0.log"
    log.write_text("RuntimeError: CUDA error: an illegal memory access was encountered\n")
    nv = {"before": {"gpus": [{"ecc_uncorrected": 0}]}, "after": {"gpus": [{"ecc_uncorrected": 2}]}}
    assert classify([TaskInput(str(log))], JobFacts(exit_code=1, nvml=nv)).cls == "gpu_hardware"
    nv["after"]["gpus"][0]["ecc_uncorrected"] = 0
    assert classify([TaskInput(str(log))], JobFacts(exit_code=1, nvml=nv)).cls == "cuda_error"


# ---- multi-rank attribution ----

def _rank_log(tmp_path: Path, rank: int, text: str) -> str:
    p = tmp_path / f"0.{rank}.log"
    p.write_text(text)
    return str(p)


def test_first_failing_rank_is_the_root_and_others_are_cascades(tmp_path):
    nccl = (FIX / "nccl_rank0.log").read_text()
    oom = (FIX / "cuda_oom_then_nccl.log").read_text()
    tasks = [
        TaskInput(_rank_log(tmp_path, 0, nccl), 0, "n1", "0", 1, None, False, 1000.0),
        TaskInput(_rank_log(tmp_path, 1, oom), 1, "n2", "0", 1, None, False, 990.0),
        TaskInput(_rank_log(tmp_path, 2, nccl), 2, "n2", "0", 1, None, False, 1001.0),
        TaskInput(_rank_log(tmp_path, 3, "step 1\n"), 3, "n3", "0", None, 15, False, 1002.0),
    ]
    v = classify(tasks, JobFacts(exit_code=1, slurm_state="FAILED"))
    assert (v.cls, v.root_rank, v.root_node, v.root_step) == ("cuda_oom", 1, "n2", "0")
    ranks = {c.rank: c.cls for c in v.cascades}
    assert ranks[0] == "nccl_error" and ranks[2] == "nccl_error"
    assert 3 not in ranks  # nothing in its log


def test_ties_in_end_time_go_to_the_lowest_rank(tmp_path):
    tasks = [TaskInput(_rank_log(tmp_path, r, f"ValueError: bad shard {r}\n"), r, f"n{r}", "0",
                       1, None, False, 50.0) for r in (3, 1, 2)]
    assert classify(tasks, JobFacts(exit_code=1)).root_rank == 1


def test_rank_without_root_cause_does_not_win_by_ending_first(tmp_path):
    tasks = [
        TaskInput(_rank_log(tmp_path, 0, "step 1\nKilled\n"), 0, "n1", "0", None, 9, False, 10.0),
        TaskInput(_rank_log(tmp_path, 1, "ModuleNotFoundError: No module named 'x'\n"), 1, "n2",
                  "0", 1, None, False, 20.0),
    ]
    v = classify(tasks, JobFacts(exit_code=1))
    assert (v.cls, v.root_rank) == ("import_error", 1)


def test_batch_log_forwarded_lines_do_not_mislead(tmp_path):
    # the batch log holds srun's copy of every rank's output plus srun's own error lines
    batch = tmp_path / "batch.0.log"
    batch.write_text("starting\n0: step 1\n0: RuntimeError: NCCL error in: x.cpp:1, unhandled "
                     "system error\nsrun: error: n1: task 0: Exited with exit code 1\n"
                     "1: torch.OutOfMemoryError: CUDA out of memory.\n"
                     "srun: error: n2: task 1: Exited with exit code 3\n")
    r0 = _rank_log(tmp_path, 0, "step 1\nRuntimeError: NCCL error in: x.cpp:1, unhandled system "
                                "error\n")
    r1 = _rank_log(tmp_path, 1, "step 1\ntorch.OutOfMemoryError: CUDA out of memory.\n")
    tasks = [TaskInput(str(batch), 0, "n1", "batch", 1, None, False, 100.0),
             TaskInput(r0, 0, "n1", "0", 1, None, False, 95.0),
             TaskInput(r1, 1, "n2", "0", 1, None, False, 90.0)]
    v = classify(tasks, JobFacts(exit_code=1))
    assert (v.cls, v.root_rank, v.root_step) == ("cuda_oom", 1, "0")
    assert v.evidence[0].file == r1
    # batch log alone: srun's labels still say which rank failed first
    vb = classify([tasks[0]], JobFacts(exit_code=1))
    assert vb.cls == "nccl_error" and vb.root_rank == 0
    assert not any("srun: error" in e.text for e in vb.evidence)


# ---- rules as data ----

def test_bad_site_rule_files_are_named(tmp_path, monkeypatch):
    d = tmp_path / "rules.d"
    d.mkdir()
    monkeypatch.setenv("GPUALERT_RULES_DIR", str(d))
    cases = {
        "rules:\n  - id: r1\n    class: no_such_class\n    patterns: ['abcdef']\n": ("r1", "class"),
        "rules:\n  - id: r2\n    class: cuda_oom\n    patterns: ['(unclosed']\n":
            ("r2", "patterns"),
        "rules:\n  - id: r3\n    class: cuda_oom\n    role: boss\n    patterns: ['abc']\n":
            ("r3", "role"),
        "rules:\n  - id: r4\n    class: cuda_oom\n    patterns: ['\\d+']\n": ("r4", "patterns"),
        "rules:\n  - id: r5\n    class: cuda_oom\n    priority: high\n    patterns: ['abc']\n":
            ("r5", "priority"),
        "rules: [\n": (None, "YAML"),
    }
    for i, (text, (rid, fld)) in enumerate(cases.items()):
        f = d / f"site{i}.yaml"
        f.write_text(text)
        with pytest.raises(RuleError) as ei:
            load_rules(use_cache=False)
        msg = str(ei.value)
        assert str(f) in msg and fld in msg and (rid is None or rid in msg), msg
        f.unlink()


def test_site_rule_adds_a_class_trigger(tmp_path, monkeypatch):
    d = tmp_path / "rules.d"
    d.mkdir()
    (d / "site.yaml").write_text(
        "rules:\n  - id: site_quota\n    class: disk_full\n    role: root\n    priority: 90\n"
        "    patterns: ['LABQUOTA-\\d+ exhausted']\n")
    monkeypatch.setenv("GPUALERT_RULES_DIR", str(d))
    rules = load_rules(use_cache=False)
    log = tmp_path / "0.0.log"
    log.write_text("step 1\nstorage: LABQUOTA-7 exhausted for /proj\n")
    assert classify([TaskInput(str(log))], JobFacts(exit_code=1), rules).cls == "disk_full"
    monkeypatch.delenv("GPUALERT_RULES_DIR")
    assert classify([TaskInput(str(log))], JobFacts(exit_code=1),
                    load_rules(use_cache=False)).cls == "unknown"


# ---- robustness of the reader ----

def test_binary_input_does_not_break(tmp_path):
    log = tmp_path / "bin.log"
    log.write_bytes(os.urandom(300_000) + b"\n\xff\xfeRuntimeError: CUDA out of memory.\xff\n"
                    + os.urandom(1000))
    v = classify([TaskInput(str(log))], JobFacts(exit_code=1))
    assert v.cls == "cuda_oom"
    assert "\ufffd" in v.evidence[0].text


def test_crlf_line_numbers_and_text(tmp_path):
    log = tmp_path / "crlf.log"
    log.write_bytes(b"a\r\nb\r\nModuleNotFoundError: No module named 'x'\r\nc\r\n")
    v = classify([TaskInput(str(log))], JobFacts(exit_code=1))
    assert v.cls == "import_error"
    assert v.evidence[0].line == 3 and not v.evidence[0].text.endswith("\r")


def test_progress_bar_carriage_returns_then_traceback(tmp_path):
    log = tmp_path / "tqdm.log"
    bar = "".join(f"\r{i}%|{'#' * (i // 5)}| {i}/100" for i in range(100)) * 50
    log.write_text("start\n" + bar + "\rFileNotFoundError: [Errno 2] No such file: 'x'\n")
    v = classify([TaskInput(str(log))], JobFacts(exit_code=1))
    assert v.cls == "file_not_found" and v.evidence[0].line == 2


def test_huge_line_without_newline_is_capped(tmp_path):
    log = tmp_path / "huge.log"
    with open(log, "wb") as f:
        f.write(b"step 1\nModuleNotFoundError: No module named 'y' ")
        chunk = b"x" * (1 << 20)
        for _ in range(100):  # a 100 MB line with no newline at all
            f.write(chunk)
    res = scan_file(str(log), load_rules())
    assert res.lines == 2 and res.bytes_read == log.stat().st_size
    assert [e.cls for e in res.events] == ["import_error"]
    assert len(res.events[0].text) <= 500
    v = classify([TaskInput(str(log))], JobFacts(exit_code=1))
    assert v.cls == "import_error"


def test_empty_file(tmp_path):
    log = tmp_path / "empty.log"
    log.write_bytes(b"")
    res = scan_file(str(log), load_rules())
    assert (res.lines, res.events) == (0, [])
    assert classify([TaskInput(str(log))], JobFacts(exit_code=2)).cls == "unknown"


def test_line_numbers_across_chunks(tmp_path):
    log = tmp_path / "long.log"
    n = 300_000  # ~ 9 MB: several read chunks
    with open(log, "w") as f:
        for i in range(n):
            f.write(f"step {i} loss={i % 7}.{i % 1000:03d}\n")
        f.write("PermissionError: [Errno 13] Permission denied: '/out'\n")
    v = classify([TaskInput(str(log))], JobFacts(exit_code=1))
    assert v.cls == "permission_denied" and v.evidence[0].line == n + 1


def _import_error_progress_cuda_oom(log: Path, blocks: int) -> Path:
    """An import error, blocks x 60,000 progress lines (~1 MiB each), then a CUDA OOM."""
    with open(log, "w") as f:
        f.write("ModuleNotFoundError: No module named 'early'\n")
        line = "step 123 loss=0.5\n" * 60_000
        for _ in range(blocks):
            f.write(line)
        f.write("torch.OutOfMemoryError: CUDA out of memory.\n")
    return log


def test_huge_file_partial_reading_is_reported(tmp_path):
    log = _import_error_progress_cuda_oom(tmp_path / "big.log", 6)
    res = scan_file(str(log), load_rules(), head_bytes=1 << 20, tail_bytes=1 << 20)
    assert res.partial and "skipped" in res.partial and "first 1 MiB" in res.partial
    assert res.bytes_read <= (2 << 20) + (1 << 20)
    assert [e.cls for e in res.events] == ["import_error", "cuda_oom"]
    assert res.events[1].line is None  # unknown after the jump


# ---- tracebacks: frames, wrappers, helpers ----

def test_generic_exception_inside_checkpoint_loader_is_checkpoint_corrupt(tmp_path):
    v = classify([TaskInput(str(FIX / "ckpt_loader_oserror.log"))], JobFacts(exit_code=1))
    assert v.cls == "checkpoint_corrupt", v.detail
    assert "Invalid argument" in v.detail
    # a specific exception raised in the same loader keeps its own class
    log = tmp_path / "0.0.log"
    log.write_text((FIX / "ckpt_loader_oserror.log").read_text().replace(
        "OSError: [Errno 22] Invalid argument",
        "FileNotFoundError: [Errno 2] No such file or directory: 'ckpt/last.pt'"))
    assert classify([TaskInput(str(log))], JobFacts(exit_code=1)).cls == "file_not_found"


def test_helper_thread_traceback_is_a_symptom_of_the_dead_worker():
    v = classify([TaskInput(str(FIX / "dataloader_sharer.log"))], JobFacts(exit_code=1))
    assert v.cls == "dataloader_worker", v.detail
    assert v.evidence[0].line == 11


def test_dataloader_reraise_wrapper_defers_to_the_original_exception():
    v = classify([TaskInput(str(FIX / "dataloader_reraise.log"))], JobFacts(exit_code=1))
    assert (v.cls, v.detail) == ("python_exception", "KeyError")
    assert v.evidence[0].line == 12


def test_exit_255_is_not_a_signal(tmp_path):
    log = tmp_path / "0.0.log"
    log.write_text("step 1 loss=0.2\ngiving up.\n")
    assert classify([TaskInput(str(log))], JobFacts(exit_code=255)).cls == "unknown"
    assert classify([TaskInput(str(log))], JobFacts(exit_code=137)).cls == "killed"


def test_collective_timeout_root_is_the_silent_straggler(tmp_path):
    timeout = (FIX / "collective_timeout.log").read_text()
    tasks = [TaskInput(_rank_log(tmp_path, r, timeout), r, f"n{r // 2}", "0", None, 6, True,
                       100.0 + r) for r in (0, 1, 3)]
    tasks.append(TaskInput(_rank_log(tmp_path, 2, "step 1\nloading next shard ...\n"), 2, "n1",
                           "0", None, 9, False, 160.0))
    v = classify(tasks, JobFacts(signal=6, slurm_state="FAILED"))
    assert (v.cls, v.root_rank, v.root_node) == ("collective_timeout", 2, "n1")
    assert "straggler" in v.detail
    assert {c.rank for c in v.cascades} == {0, 1, 3}
    # when a rank failed with a cause of its own, that rank is the root, not a silent one
    tasks[1] = TaskInput(_rank_log(tmp_path, 1, "ValueError: bad batch\n"), 1, "n0", "0", 1,
                         None, False, 50.0)
    v = classify(tasks, JobFacts(exit_code=1, slurm_state="FAILED"))
    assert (v.cls, v.root_rank) == ("python_exception", 1)


def test_traceback_scope_needs_a_fitting_role(tmp_path, monkeypatch):
    d = tmp_path / "rules.d"
    d.mkdir()
    (d / "s.yaml").write_text("rules:\n  - id: frame_root\n    class: cuda_oom\n    role: root\n"
                              "    scope: traceback\n    patterns: ['mylib/alloc.py']\n")
    monkeypatch.setenv("GPUALERT_RULES_DIR", str(d))
    with pytest.raises(RuleError, match=r"s\.yaml: rule 'frame_root': field 'scope'"):
        load_rules(use_cache=False)


def test_time_budget_stops_the_head_and_still_reads_the_tail(tmp_path):
    log = _import_error_progress_cuda_oom(tmp_path / "slow.log", 8)
    res = scan_file(str(log), load_rules(), tail_bytes=1 << 20, budget_s=0.0)
    assert res.partial and "time budget" in res.partial and "skipped" in res.partial
    assert res.bytes_read < log.stat().st_size
    assert [e.cls for e in res.events] == ["import_error", "cuda_oom"]


def test_a_line_repeated_every_step_is_cheap_and_keeps_first_and_last(tmp_path):
    log = tmp_path / "nan.log"
    with open(log, "w") as f:
        for i in range(200_000):
            f.write(f"step {i} loss=0.{i % 97:02d}\n")
        for i in range(200_000, 400_000):
            f.write(f"step {i} loss=nan\n")
    res = scan_file(str(log), load_rules())
    assert res.lines == 400_000
    lines = [e.line for e in res.events]
    assert lines[0] == 200_001 and lines[-1] == 400_000
    assert len(lines) < 100  # not one event per line
    v = classify([TaskInput(str(log))], JobFacts(exit_code=1))
    assert v.cls == "nan_divergence" and v.evidence[0].line == 200_001


def test_mostly_distinct_lines_take_the_search_path_with_right_line_numbers(tmp_path):
    rnd = random.Random(5)
    log = tmp_path / "ids.log"
    with open(log, "w") as f:
        for _ in range(30_000):  # random hex ids: no two lines share a shape
            f.write(f"sample {rnd.getrandbits(64):x} path=/d/{rnd.getrandbits(40):x}.bin\n")
        f.write("PermissionError: [Errno 13] Permission denied: '/d/out'\n")
        for _ in range(100):
            f.write(f"sample {rnd.getrandbits(64):x}\n")
    v = classify([TaskInput(str(log))], JobFacts(exit_code=1))
    assert v.cls == "permission_denied" and v.evidence[0].line == 30_001


def test_ranks_terminated_after_a_silent_failure_do_not_make_it_killed(tmp_path):
    tasks = [TaskInput(_rank_log(tmp_path, 0, "step 1\n"), 0, "n1", "0", None, 15, False, 20.0),
             TaskInput(_rank_log(tmp_path, 1, "step 1\n"), 1, "n2", "0", 3, None, False, 10.0)]
    assert classify(tasks, JobFacts(exit_code=3)).cls == "unknown"
    tasks[1].exit_code, tasks[1].signal = None, 9
    v = classify(tasks, JobFacts(exit_code=None))
    assert (v.cls, v.root_rank) == ("killed", 1)


def test_site_rule_can_map_a_slurm_reason(tmp_path, monkeypatch):
    d = tmp_path / "rules.d"
    d.mkdir()
    (d / "site.yaml").write_text(
        "rules:\n  - id: site_failed_node_down\n    class: node_failure\n    source: slurm\n"
        "    priority: 90\n    patterns: ['^state=FAILED reason=NodeDown']\n")
    monkeypatch.setenv("GPUALERT_RULES_DIR", str(d))
    log = tmp_path / "0.0.log"
    log.write_text("step 1\n")
    rules = load_rules(use_cache=False)
    job = JobFacts(exit_code=1, slurm_state="FAILED", slurm_reason="NodeDown")
    assert classify([TaskInput(str(log))], job, rules).cls == "node_failure"
    job = dataclasses.replace(job, slurm_reason="NonZeroExitCode")  # (JobFacts is frozen)
    assert classify([TaskInput(str(log))], job, rules).cls == "unknown"
