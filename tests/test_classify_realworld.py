"""The classifier on inputs as real logs have them (issue 10): evidence wherever it appears,
silent failures on exit 0, launcher and paste shapes, the failing rank from Slurm's own words,
the decision order as data. Real failing processes where they can run here; the multi-rank
Slurm lines follow srun's and slurmstepd's documented formats."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from classifylib import TORCH_PY, run_py

from gpualert_slurm.classify import (
    JobFacts,
    RuleError,
    TaskInput,
    classify,
    load_precedence,
    load_rules,
)
from gpualert_slurm.classify.scan import line_view, scan_file

STEPS = "".join(f"step {i} loss {3.0 / i:.3f}\n" for i in range(1, 30))


def write(tmp_path: Path, name: str, text: str | bytes) -> str:
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(p)


# ---- line shapes -----------------------------------------------------------------------------

@pytest.mark.parametrize("line,body,labels", [
    ("0: ModuleNotFoundError: No module named 'x'", "ModuleNotFoundError: No module named 'x'",
     {"task": 0}),
    ("[rank5]: RuntimeError: boom", "RuntimeError: boom", {"rank": 5}),
    ("[default3]:[rank7]:  File \"t.py\", line 1", " File \"t.py\", line 1",
     {"local": 3, "rank": 7}),
    ("[1,3]<stderr>:KeyError: 'a'", "KeyError: 'a'", {"task": 3}),
    ("gpu041: Traceback (most recent call last):", "Traceback (most recent call last):", {}),
    ("2026-11-29 10:00:01,123 - ERROR - x", "ERROR - x", {}),
    ("[2023-06-07 22:16:00,018] [INFO] y", "[INFO] y", {}),
    ("[ 4821.553190] Out of memory: Killed process 1 (python)",
     "Out of memory: Killed process 1 (python)", {}),
    ("Nov 29 10:00:00 n1 kernel: NVRM: Xid (PCI:0000:3b:00): 79", "NVRM: Xid (PCI:0000:3b:00): 79",
     {}),
    ("> >   File \"C:\\Users\\me\\torch\\serialization.py\", line 3",
     "  File \"C:/Users/me/torch/serialization.py\", line 3", {}),
    ("**RuntimeError: CUDA error: out of memory**", "RuntimeError: CUDA error: out of memory", {}),
    (" 60%|######    | 60/100 [00:01<00:00, 40.0it/s]bash: line 1:  7915 Killed   python t.py",
     "bash: line 1:  7915 Killed   python t.py", {}),
    # not prefixes: Slurm's *** markers, a dotted exception with a digit in its module
    ("slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2026 DUE TO TIME LIMIT ***",
     "slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2026 DUE TO TIME LIMIT ***", {}),
    ("sqlite3.OperationalError: no such table: m", "sqlite3.OperationalError: no such table: m",
     {}),
    ("  File \"/x/torch/__init__.py\", line 3, in __call__",
     "  File \"/x/torch/__init__.py\", line 3, in __call__", {}),
    ("    y = x**2 + z", "    y = x**2 + z", {}),
    ("> **ValueError**: bad", "ValueError: bad", {}),
    ("trainer-1  | RuntimeError: CUDA out of memory", "RuntimeError: CUDA out of memory", {}),
    ("[pod/trainer-0/main] KeyError: 1", "KeyError: 1", {}),
    ("Nov 29 10:00:00 n1 python[4242]: MemoryError", "MemoryError", {}),
])
def test_line_view_removes_what_wraps_a_message(line, body, labels):
    v = line_view(line)
    assert v.body == body
    assert {k: getattr(v, k) for k in ("task", "rank", "local") if getattr(v, k) is not None} \
        == labels


SHAPED = [
    ("crlf", lambda t: t.replace("\n", "\r\n")),
    ("quoted", lambda t: "".join("> " + ln + "\n" for ln in t.splitlines())),
    ("markdown", lambda t: "**Error:**\n```\n" + t + "```\n"),
    ("indented", lambda t: "".join("    " + ln + "\n" for ln in t.splitlines())),
    ("timestamps", lambda t: "".join(f"2026-11-29T10:00:{i:02d}Z {ln}\n"
                                     for i, ln in enumerate(t.splitlines()))),
    ("windows", lambda t: t.replace("/", "\\")),
    ("cut-tail", lambda t: t.rstrip("\n")),
]


@pytest.mark.parametrize("shape,fn", SHAPED, ids=[s[0] for s in SHAPED])
@pytest.mark.parametrize("code,cls", [
    ("import no_such_module_here_xyz", "import_error"),
    ("open('/nonexistent/dir/data.csv')", "file_not_found"),
    ("d = {}\nd['batch_size']", "python_exception"),
])
def test_a_real_failure_in_every_shape_keeps_its_class(tmp_path, shape, fn, code, cls):
    t = run_py(tmp_path, code)
    text = Path(t.path).read_text()
    path = write(tmp_path, "shaped.log", fn(text))
    v = classify([TaskInput(path)], JobFacts(exit_code=1))
    assert v.cls == cls, (shape, v.detail)


# ---- evidence wherever it appears, killed vs host_oom -----------------------------------------

def test_kernel_oom_line_inside_a_task_log_decides_host_oom(tmp_path):
    path = write(tmp_path, "0.0.log", STEPS + "[ 8812.4] Out of memory: Killed process 4096 "
                 "(python) total-vm:9123456kB, anon-rss:8812345kB\nKilled\n")
    v = classify([TaskInput(path)], JobFacts(exit_code=137))
    assert v.cls == "host_oom"
    assert "Out of memory: Killed process" in v.evidence[0]["text"]


def test_bare_killed_from_bash_is_killed_and_with_oom_evidence_anywhere_host_oom(tmp_path):
    log = tmp_path / "0.0.log"
    with open(log, "wb") as out:
        p = subprocess.run(["bash", "-c", f"{sys.executable} -c 'import os; print(1, flush=True);"
                            " os.kill(os.getpid(), 9)'; exit $?"], stdout=out,
                           stderr=subprocess.STDOUT, timeout=60)
    assert p.returncode == 137 and "Killed" in log.read_text()
    v = classify([TaskInput(str(log))], JobFacts(exit_code=137))
    assert v.cls == "killed" and "Killed" in v.evidence[0]["text"]
    # the same job with slurmstepd's cgroup OOM message forwarded into another log
    other = write(tmp_path, "batch.0.log", "slurmstepd: error: Detected 1 oom-kill event(s) in "
                  "StepId=5.0 cgroup. Some of your processes may have been killed by the cgroup "
                  "out-of-memory handler.\n")
    v = classify([TaskInput(str(log)), TaskInput(other, step="batch")], JobFacts(exit_code=137))
    assert v.cls == "host_oom"


def test_xid_in_a_task_log_is_gpu_hardware_when_the_job_failed(tmp_path):
    path = write(tmp_path, "0.0.log", STEPS + "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has "
                 "fallen off the bus.\nRuntimeError: CUDA error: unspecified launch failure\n")
    assert classify([TaskInput(path)], JobFacts(exit_code=1)).cls == "gpu_hardware"


# ---- silent failures --------------------------------------------------------------------------

def test_nan_abort_with_exit_0_is_a_silent_failure(tmp_path):
    t = run_py(tmp_path, """
        import math, sys
        w = 1.0
        for step in range(1, 40):
            loss = w * w * w * w
            print(f"step {step} | loss = {loss:.4g}")
            if not math.isfinite(loss):
                print("NaN or Inf detected in loss, aborting.")
                sys.exit(0)
            w -= 3.5 * 4 * w * w * w
        """)
    assert t.exit_code == 0
    v = classify([t], JobFacts(exit_code=0))
    assert (v.cls, v.silent_failure) == ("nan_divergence", True)
    assert v.to_json()["silent_failure"] is True and "exited 0" in v.detail


@pytest.mark.parametrize("code", [
    # a metric column named nan_count, "0 errors"
    "for i in range(1, 200): print(f'step {i} loss {1/i:.3f} nan_count 0 inf_count 0')\n"
    "print('finished: 0 errors')",
    # one nan step, skipped and recovered, then long normal training
    "print('step 3 loss = nan, skipping step')\n"
    "for i in range(4, 200): print(f'step {i} loss = {1/i:.3f}')",
    "print('no NaN or Inf detected in gradients')",
])
def test_benign_nan_mentions_with_exit_0_stay_success(tmp_path, code):
    t = run_py(tmp_path, code)
    v = classify([t], JobFacts(exit_code=0))
    assert (v.cls, v.silent_failure) == ("success", False), v.detail


def test_nan_in_a_failed_job_is_not_flagged_silent(tmp_path):
    path = write(tmp_path, "0.0.log", STEPS + "step 30 loss = nan\n")
    v = classify([TaskInput(path)], JobFacts(exit_code=1))
    assert (v.cls, v.silent_failure) == ("nan_divergence", False)


# ---- the two known weaknesses of the last stop -------------------------------------------------

def test_warning_raised_as_an_error_is_the_exception_not_a_warning(tmp_path):
    t = run_py(tmp_path, """
        import warnings
        warnings.warn("old api", DeprecationWarning)
        """, "-W", "error::DeprecationWarning")
    assert t.exit_code == 1
    v = classify([t], JobFacts(exit_code=1))
    assert (v.cls, v.detail) == ("python_exception", "DeprecationWarning")
    # a printed warning (file:line: prefix) before a real error stays context
    t = run_py(tmp_path, "import warnings; warnings.warn('x is slow', UserWarning)\n"
               "raise KeyError('k')", name="1.log")
    assert classify([t], JobFacts(exit_code=1)).detail == "KeyError"


def test_raw_exception_dump_of_a_lost_fd_sharing_connection_is_dataloader_worker(tmp_path):
    """Python's last-resort dump ("lost sys.stderr") of the ConnectionResetError that
    multiprocessing's resource_sharer thread got when a DataLoader worker died."""
    path = write(tmp_path, "0.0.log", STEPS + "Traceback (most recent call last):\n"
                 "object address  : 0x7f4291351340\nobject refcount : 2\nobject type     : "
                 "0x9ec680\nobject type name: ConnectionResetError\nobject repr     : "
                 "ConnectionResetError(104, 'Connection reset by peer')\nlost sys.stderr\n")
    assert classify([TaskInput(path)], JobFacts(exit_code=1)).cls == "dataloader_worker"


# ---- decision order ---------------------------------------------------------------------------

def test_completed_exit_0_silent_longer_than_the_threshold_is_success(tmp_path):
    path = write(tmp_path, "0.0.log", STEPS + "final eval done\n")
    v = classify([TaskInput(path, exit_code=0)],
                 JobFacts(exit_code=0, slurm_state="COMPLETED", hang_threshold_s=60,
                          silence_s=3600))
    assert v.cls == "success"
    v = classify([TaskInput(path, exit_code=None, signal=15)],
                 JobFacts(exit_code=None, slurm_state="TIMEOUT", hang_threshold_s=60,
                          silence_s=3600))
    assert v.cls == "hang"


LIMIT = ("slurmstepd: error: *** JOB 9 ON n1 CANCELLED AT 2026-11-29T12:00:00 DUE TO TIME LIMIT"
         " ***\n")


def test_time_limit_line_does_not_demote_a_cause_that_came_just_before_it(tmp_path):
    path = write(tmp_path, "0.0.log", STEPS + "Traceback (most recent call last):\n  File "
                 "\"t.py\", line 4, in <module>\nKeyError: 'input_ids'\n" + LIMIT)
    v = classify([TaskInput(path, signal=15)], JobFacts(signal=15))
    assert (v.cls, v.step) == ("python_exception", "time_limit_or_cancel")
    assert v.detail.startswith("(then time limit)")
    # an exception the job survived, long before the limit: the limit decides
    path = write(tmp_path, "1.log", "KeyError: 'x' (logged and skipped)\n" + STEPS * 10 + LIMIT)
    assert classify([TaskInput(path, signal=15)], JobFacts(signal=15)).cls == "time_limit"


def test_precedence_is_data_and_checked():
    ids = load_precedence()
    assert ids.index("hardware") < ids.index("log_root") < ids.index("signal")
    assert ids[-1] == "unknown"
    with pytest.raises(RuleError, match="precedence.yaml: field 'steps': unknown step id"):
        load_precedence("steps:\n  - id: hardware\n  - id: no_such_step\n  - id: unknown\n")
    with pytest.raises(RuleError, match="each step once"):
        load_precedence("steps: [hardware, hardware, unknown]\n")


# ---- the failing rank and node from Slurm's and the launchers' words --------------------------

def _task(tmp_path, name, text, rank, node, step, code=None, sig=None, end=None):
    return TaskInput(write(tmp_path, name, text), rank=rank, node=node, step=step,
                     exit_code=code, signal=sig, end_time=end)


def test_srun_out_of_memory_names_the_killed_rank_not_the_batch_task(tmp_path):
    tasks = [
        _task(tmp_path, "batch.0.log", "srun: error: n2: task 1: Out Of Memory\nsrun: error: "
              "n1: task 0: Terminated\n", 0, "n1", "batch", code=1, end=30.0),
        _task(tmp_path, "0.0.log", STEPS + "RuntimeError: [gloo/transport/tcp/pair.cc:534] "
              "Connection closed by peer [10.0.0.2]:27018\n", 0, "n1", "0", sig=15, end=20.0),
        _task(tmp_path, "0.1.log", STEPS, 1, "n2", "0", sig=9, end=10.0),
    ]
    v = classify(tasks, JobFacts(exit_code=1, slurm_state="OUT_OF_MEMORY"))
    assert (v.cls, v.root_rank, v.root_node) == ("host_oom", 1, "n2")
    v = classify(tasks, JobFacts(exit_code=1))  # no Slurm state: srun's line alone
    assert (v.cls, v.root_rank, v.root_node) == ("host_oom", 1, "n2")


def test_srun_segfault_of_rank_2_of_3(tmp_path):
    tasks = [
        _task(tmp_path, "batch.0.log", "srun: error: n3: task 2: Segmentation fault (core "
              "dumped)\nsrun: error: n1: task 0: Terminated\nsrun: error: n2: task 1: "
              "Terminated\n", 0, "n1", "batch", code=139, end=30.0),
        *[_task(tmp_path, f"0.{r}.log", STEPS, r, f"n{r + 1}", "0", sig=15, end=21.0)
          for r in (0, 1)],
        _task(tmp_path, "0.2.log", STEPS[:100], 2, "n3", "0", sig=11, end=20.0),
    ]
    v = classify(tasks, JobFacts(exit_code=139, slurm_state="FAILED"))
    assert (v.cls, v.root_rank, v.root_node) == ("segfault", 2, "n3")


def test_node_failure_names_the_lost_node(tmp_path):
    tasks = [_task(tmp_path, "batch.0.log", "srun: error: Node failure on n3\nslurmstepd: "
                   "error: *** STEP 4.0 ON n1 CANCELLED AT 2026-11-29T10:00:00 DUE TO NODE "
                   "FAILURE ***\n", 0, "n1", "batch", code=1, end=30.0)]
    v = classify(tasks, JobFacts(exit_code=1))
    assert (v.cls, v.root_node) == ("node_failure", "n3")


def test_global_rank_from_torch_prefixes_when_a_task_runs_several_ranks(tmp_path):
    """Slurm task 1 runs global ranks 2 and 3 (torchrun per node): rank 3 raised first."""
    tasks = [
        _task(tmp_path, "0.0.log", "[rank0]: step 1\n[rank1]: step 1\n", 0, "n1", "0", sig=15,
              end=21.0),
        _task(tmp_path, "0.1.log", "[rank2]: step 1\n[rank3]: Traceback (most recent call "
              "last):\n[rank3]:   File \"t.py\", line 9, in <module>\n[rank3]: IndexError: index"
              " 4 is out of bounds\n[rank2]: RuntimeError: [gloo/transport/tcp/pair.cc:534] "
              "Connection closed by peer [10.0.0.2]:29500\n", 1, "n2", "0", code=1, end=20.0),
    ]
    v = classify(tasks, JobFacts(exit_code=1))
    assert (v.cls, v.root_rank, v.root_node) == ("python_exception", 3, "n2")


def test_torchrun_root_cause_block_names_rank_and_host(tmp_path):
    """A real torchrun (torch.distributed.run, 2 local workers, gloo) whose rank 1 is killed by
    SIGKILL: the verdict's rank and host come from the agent's Root Cause block."""
    fw = Path(TORCH_PY)
    assert fw.exists(), f"{fw}: PyTorch's venv is needed (scripts/install-test-deps.sh)"
    prog = tmp_path / "w.py"
    prog.write_text("import os, signal, time\nimport torch.distributed as d\n"
                    "d.init_process_group('gloo')\nprint('rank', d.get_rank(), flush=True)\n"
                    "if d.get_rank() == 1:\n    time.sleep(0.5); os.kill(os.getpid(), 9)\n"
                    "time.sleep(30)\n")
    log = tmp_path / "run.0.log"
    with open(log, "wb") as out:
        p = subprocess.run([str(fw), "-m", "torch.distributed.run", "--nproc_per_node=2",
                            "--master_port=29631", str(prog)], stdout=out,
                           stderr=subprocess.STDOUT, timeout=120)
    assert p.returncode != 0 and "Root Cause" in log.read_text()
    v = classify([TaskInput(str(log), rank=0, node="n1", step="0", exit_code=p.returncode)],
                 JobFacts(exit_code=p.returncode))
    assert (v.cls, v.root_rank) == ("killed", 1)


def test_batch_log_alone_does_not_name_rank_0(tmp_path):
    tasks = [_task(tmp_path, "batch.0.log", STEPS + "Traceback (most recent call last):\n"
                   "ValueError: bad\n", 0, "n1", "batch", code=1, end=10.0)]
    v = classify(tasks, JobFacts(exit_code=1))
    assert (v.cls, v.root_rank) == ("python_exception", None)


# ---- the scan's time budget is a real bound ---------------------------------------------------

def test_budget_bounds_a_candidate_rich_log_and_still_reads_its_end(tmp_path):
    log = tmp_path / "big.log"
    # capitalised: grep's patterns are case-sensitive where the rules are, and every one of
    # these lines must reach Python (lower-case words are left out by grep, and fast)
    words = ["Error", "Timeout", "NCCL", "Memory", "Failed", "Killed"]
    with open(log, "w") as f:
        for i in range(300_000):
            f.write(f"step {i} worker {i % 89} {words[i % 6]} rate 0.{i % 97:02d} "
                    f"id={format(i * 2654435761 % (1 << 40), 'x')}\n")
        f.write("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    res = scan_file(str(log), load_rules(), budget_s=0.3)
    assert res.partial and "skipped" in res.partial
    assert res.events[-1].cls == "cuda_oom"


def test_labels_json_of_realworld_set_is_well_formed():
    root = Path(__file__).resolve().parent.parent / "corpus" / "realworld"
    labels = [json.loads(x) for x in (root / "labels.jsonl").read_text().splitlines()]
    assert len(labels) >= 100
    for lab in labels:
        assert lab["source"] in ("reproduced", "synthetic")
        assert lab["source"] != "synthetic" or lab["how"], lab["id"]
        for t in lab["tasks"]:
            assert (root / t["log"]).is_file(), lab["id"]


def test_time_limit_after_a_labelled_rank_error_in_the_batch_log(tmp_path):
    """srun --label: rank 1's traceback is labelled, slurmstepd's time-limit line is not."""
    path = write(tmp_path, "batch.0.log", "0: step 1\n1: step 1\n1: Traceback (most recent call "
                 "last):\n1:   File \"t.py\", line 3, in <module>\n1: ValueError: bad shard\n"
                 + LIMIT)
    v = classify([TaskInput(path, rank=0, node="n1", step="batch", signal=15)],
                 JobFacts(slurm_state="TIMEOUT"))
    assert (v.cls, v.root_rank) == ("python_exception", 1)


def test_cut_off_traceback_and_shell_exit_codes(tmp_path):
    """A log cut inside a traceback (its exception line lost): an exception, with the class a
    frame rule gives; the shell's 126/127 and a task's 128+N exit code without other evidence."""
    t = run_py(tmp_path, "import torch_not_here_xyz", name="a.log")
    text = Path(t.path).read_text()
    cut = write(tmp_path, "cut.log", text[:text.rindex("ModuleNotFoundError")])
    v = classify([TaskInput(cut)], JobFacts(exit_code=1))
    assert (v.cls, v.step) == ("python_exception", "cut_traceback")
    frames = write(tmp_path, "dev.log", "Traceback (most recent call last):\n  File \"t.py\", line"
                   " 3, in <module>\n  File \"/v/torch/_prims_common/__init__.py\", line 931, in "
                   "check_same_device\n    raise RuntimeError(msg)")
    assert classify([TaskInput(frames)], JobFacts(exit_code=1)).cls == "device_mismatch"
    quiet = write(tmp_path, "q.log", STEPS)
    assert classify([TaskInput(quiet)], JobFacts(exit_code=126)).cls == "permission_denied"
    assert classify([TaskInput(quiet)], JobFacts(exit_code=127)).cls == "file_not_found"
    v = classify([TaskInput(quiet, exit_code=139, step="batch")], JobFacts(exit_code=11))
    assert v.cls == "segfault"


def test_srun_naming_the_first_task_beats_a_peer_error_in_its_own_log(tmp_path):
    """Rank 1 is OOM-killed first (exit record: SIGKILL at t=10); rank 0 then fails in NCCL
    (its own log, t=20). srun's task line and the records make rank 1 the root."""
    tasks = [
        _task(tmp_path, "batch.0.log", "srun: error: n2: task 1: Out Of Memory\nsrun: error: "
              "n1: task 0: Exited with exit code 1\n", 0, "n1", "batch", code=1, end=30.0),
        _task(tmp_path, "0.0.log", STEPS + "torch.distributed.DistBackendError: NCCL error in: "
              "ProcessGroupNCCL.cpp:1970, unhandled system error\n", 0, "n1", "0", code=1,
              end=20.0),
        _task(tmp_path, "0.1.log", STEPS, 1, "n2", "0", sig=9, end=10.0),
    ]
    v = classify(tasks, JobFacts(exit_code=1))
    assert (v.cls, v.root_rank, v.root_node) == ("host_oom", 1, "n2")
    assert any(c["cls"] == "nccl_error" and c["rank"] == 0 for c in v.cascades)


@pytest.mark.parametrize("text,cls", [
    ("epoch 3 train_loss: nan val_loss: nan\n", "nan_divergence"),
    ("loss: tensor(nan, device='cuda:0', grad_fn=<AddBackward0>)\n", "nan_divergence"),
    ("FloatingPointError: Minimum loss scale reached (0.0001). Your loss is probably exploding.\n",
     "nan_divergence"),
    ("tensorflow.python.framework.errors_impl.InternalError: Failed copying input tensor from "
     "/job:localhost/replica:0/task:0/device:CPU:0 to /job:localhost/replica:0/task:0/device:"
     "GPU:0 in order to run _EagerConst: Dst tensor is not initialized.\n", "cuda_oom"),
    ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n",
     "host_oom"),
    ("RuntimeError: Socket Timeout\n", "collective_timeout"),
    ("zsh: segmentation fault  python train.py\n", "segfault"),
    ("slurmstepd: error: Exceeded job memory limit\nKilled\n", "host_oom"),
    # TensorFlow's CUDA library probe on a CPU node is a warning; the real error decides
    ("2023-01-01 10:00:00.1: W tensorflow/stream_executor/platform/default/dso_loader.cc:64] "
     "Could not load dynamic library 'libcudart.so.11.0'; dlerror: libcudart.so.11.0: cannot "
     "open shared object file: No such file or directory\nKeyError: 'label'\n",
     "python_exception"),
])
def test_framework_wordings(tmp_path, text, cls):
    path = write(tmp_path, "0.0.log", STEPS + text)
    assert classify([TaskInput(path)], JobFacts(exit_code=1)).cls == cls


def test_rules_own_literals_are_in_every_corpus_line_their_patterns_match():
    """A rule's `literals` replace the ones read off its patterns: a line its patterns match but
    that holds none of them would be skipped unseen. Checked on every line of the corpora."""
    from gpualert_slurm.classify.rules import norm_text
    from gpualert_slurm.classify.scan import clean_text

    rules = [r for r in load_rules().rules if r.own_literals]
    assert {r.id for r in rules} >= {"python_exception", "error_message", "warning_raised"}
    root = Path(__file__).resolve().parent.parent / "corpus"
    logs = [p for d in ("cases", "holdout/cases", "holdout2/cases", "realworld/cases")
            for p in (root / d).rglob("*.log")]
    assert len(logs) > 1000
    checked = 0
    for path in logs:
        for raw in path.read_bytes().replace(b"\r", b"\n").split(b"\n"):
            text = raw.decode("utf-8", "replace").rstrip()
            cleaned = clean_text(text)
            body = line_view(cleaned, cleaned=True).body.lstrip()
            pre = norm_text(cleaned) + "\n"
            for r in rules:
                if r.match(body):
                    checked += 1
                    assert any(lit in pre for lit in r.plits[0]), (r.id, str(path), text)
    assert checked > 500


def test_the_end_of_a_file_is_read_even_when_the_tail_runs_out_of_budget(tmp_path):
    log = tmp_path / "big.log"
    with open(log, "w") as f:
        for i in range(400_000):
            f.write(f"step {i} worker {i % 89} error rate 0.{i % 97:02d} "
                    f"id={format(i * 2654435761 % (1 << 40), 'x')}\n")
        f.write("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    res = scan_file(str(log), load_rules(), budget_s=0.0)
    assert res.events and res.events[-1].cls == "cuda_oom", res.partial


def test_mpirun_names_the_rank_and_node_that_died(tmp_path):
    path = write(tmp_path, "batch.0.log", STEPS + "[n2:04242] *** Process received signal ***\n"
                 "[n2:04242] Signal: Segmentation fault (11)\n-------------------------------\n"
                 "mpirun noticed that process rank 3 with PID 4242 on node n2 exited on signal 11 "
                 "(Segmentation fault).\n")
    v = classify([TaskInput(path, rank=0, node="n1", step="batch", exit_code=139)],
                 JobFacts(exit_code=139))
    assert (v.cls, v.root_rank, v.root_node) == ("segfault", 3, "n2")
