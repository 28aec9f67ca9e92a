"""What the classifier's tests (tests/test_classify_<family>.py, one file per rule family of
gpualert_slurm/classify/rules/) share: a task whose log holds a text, or the output of a real
Python process; the verdict on a job of such tasks, on a job of one task, on a log given alone;
and the pieces of log that tests of more than one family write (tracebacks, progress lines,
launcher and collective lines). Each piece is kept byte for byte as its tests were written: a
frame's line number or a progress line can show in a verdict's evidence."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gpualert_slurm.classify import Cause, JobFacts, TaskInput, classify

# PyTorch (CPU) for the tests that run a real spawn or torchrun job: the venv `make test` makes
# (scripts/install-test-deps.sh), never one that only `make corpus` leaves behind.
TORCH_PY = os.environ.get("GPUALERT_TORCH_VENV", "/opt/gpualert/torch-venv") + "/bin/python"


def need_torch_venv() -> None:
    """Tests that run real torch programs fail, never skip, without the torch CPU venv."""
    if not Path(TORCH_PY).exists():
        pytest.fail(f"{TORCH_PY} is missing: scripts/install-test-deps.sh makes it (make test)",
                    pytrace=False)


def write(tmp_path: Path, name: str, text: str | bytes) -> str:
    """The path of file `name` in tmp_path, written to hold `text`."""
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(p)


def task(tmp_path: Path, text: str, name: str = "run.0.log", rank: int = 0,
         exit_code: int | None = 1, signal: int | None = None, **kw: Any) -> TaskInput:
    """The task of rank `rank` whose log `name` (written in tmp_path) holds `text`; `kw`: more
    TaskInput fields (its step is "run" unless `step` says otherwise)."""
    log = tmp_path / name
    log.write_text(text)
    return TaskInput(str(log), rank=rank, step=kw.pop("step", "run"), exit_code=exit_code,
                     signal=signal, **kw)


def job_verdict(tasks: list[TaskInput], **kw: Any) -> Cause:
    """The verdict on a job of `tasks`; its exit code and signal are the first task's unless
    `exit_code` / `signal` say otherwise; `kw`: more JobFacts fields."""
    code = kw.pop("exit_code", tasks[0].exit_code)
    return classify(tasks, JobFacts(exit_code=code, signal=kw.pop("signal", tasks[0].signal),
                                    **kw))


def verdict(tmp_path: Path, text: str, exit_code: int | None = 1, signal: int | None = None,
            kernel: str | None = None) -> Cause:
    """The verdict on a job of one task (run.0.log holding `text`) that ended with `exit_code`
    or `signal`; `kernel`: the node's kernel.log for the job."""
    kw = {}
    if kernel is not None:
        (tmp_path / "kernel.log").write_text(kernel)
        kw["kernel_log"] = str(tmp_path / "kernel.log")
    return classify([task(tmp_path, text, exit_code=exit_code, signal=signal)],
                    JobFacts(exit_code=exit_code, signal=signal, **kw))


def run_py(tmp_path: Path, code: str, *args: str, name: str = "0.0.log") -> TaskInput:
    """Run a real Python process (`args`: the interpreter's options) that fails the way `code`
    does; its output is the task's log `name`, its end the task's exit code or signal."""
    log = tmp_path / name
    with open(log, "wb") as out:
        p = subprocess.run([sys.executable, *args, "-c", textwrap.dedent(code)], stdout=out,
                           stderr=subprocess.STDOUT, timeout=60)
    rc = p.returncode
    return TaskInput(str(log), rank=0, step="0", exit_code=rc if rc >= 0 else None,
                     signal=-rc if rc < 0 else None)


def log_alone(tmp_path: Path, text: str) -> str:
    """The class of a log given alone (no exit status), as a pasted log is scored."""
    return verdict(tmp_path, text, exit_code=None).cls


def run(tmp_path: Path, code: str | None = None, *argv: str, name: str = "0.0.log",
        ) -> TaskInput:
    """Run `python -c code` (or `python *argv`) in tmp_path; its stdout+stderr is the log."""
    log = tmp_path / name
    cmd = [sys.executable, "-c", textwrap.dedent(code)] if code is not None else [
        sys.executable, *argv]
    with open(log, "wb") as out:
        p = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=60, cwd=tmp_path)
    rc = p.returncode
    return TaskInput(str(log), rank=0, step="0", exit_code=rc if rc >= 0 else None,
                     signal=-rc if rc < 0 else None)


def run_verdict(t: TaskInput) -> Cause:
    """The verdict on a job of the one task `t` (of run()): its exit code, or 128 + its signal."""
    code = t.exit_code if t.exit_code is not None else 128 + (t.signal or 0)
    assert code != 0 or t.signal is None
    return classify([t], JobFacts(exit_code=code, signal=t.signal))


def run_prog(tmp_path: Path, py: str, code: str, name: str = "prog.py") -> str:
    """The output (stdout, then stderr) of program `code`, written to tmp_path/`name` and run
    there by the interpreter `py`; it must fail."""
    prog = tmp_path / name
    prog.write_text(textwrap.dedent(code))
    p = subprocess.run([py, str(prog)], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path)
    assert p.returncode != 0
    return p.stdout + p.stderr


def timed_steps(start_h: int, n: int) -> str:
    """A logger's timed lines, one a minute from start_h:00 on 2026-03-01."""
    return "".join(f"2026-03-01 {start_h + i // 60:02d}:{i % 60:02d}:07,123 INFO train: step "
                   f"{i * 20} loss {2.0 - i * 0.01:.3f}\n" for i in range(n))


# ---- tracebacks ----

SITE = "/opt/conda/envs/train/lib/python3.11/site-packages"  # a training job's libraries
USER = ("/home/u/proj/train.py", "main", "run(cfg)")  # (file, function, source) of a frame
USER_LOADER = ("/home/u/proj/train.py", "main", "for batch in loader:")
# torch.load raising its weights_only refusal; fsspec's HTTP file system on a missing URL
TORCH_LOAD = (f"{SITE}/torch/serialization.py", "load",
              "raise pickle.UnpicklingError(_get_wo_message(str(e))) from None")
FSSPEC = (f"{SITE}/fsspec/implementations/http.py", "_info",
          "raise FileNotFoundError(url) from exc")
CHAIN = "\nThe above exception was the direct cause of the following exception:\n\n"


def frames(*fr: tuple[str, str, str]) -> str:
    """The frame lines of a traceback, frame k at line 14k + 11."""
    out = []
    for path, func, src in fr:
        out += [f'  File "{path}", line {len(out) * 7 + 11}, in {func}', f"    {src}"]
    return "\n".join(out) + "\n"


def tb(*fr: tuple[str, str, str], exc: str) -> str:
    """A traceback of frames `fr` (frames()) ending in `exc`."""
    return "Traceback (most recent call last):\n" + frames(*fr) + exc + "\n"


def tb_by_line(*frames: tuple[str, str, str], exc: str) -> str:
    """tb() with frame k at line 14k + 18."""
    out = ["Traceback (most recent call last):"]
    for path, func, src in frames:
        out += [f'  File "{path}", line {len(out) * 7 + 11}, in {func}', f"    {src}"]
    return "\n".join(out) + "\n" + exc + "\n"


def tb_by_frame(*fr: tuple[str, str, str], exc: str) -> str:
    """tb() with frame k at line 7k + 11."""
    out = ["Traceback (most recent call last):"]
    for n, (path, func, src) in enumerate(fr):
        out += [f'  File "{path}", line {n * 7 + 11}, in {func}', f"    {src}"]
    return "\n".join(out) + "\n" + exc + "\n"


# A traceback's frames without its exception line, for a test to end as it needs
FRAMES = ('Traceback (most recent call last):\n'
          '  File "/home/u/serve/main.py", line 88, in <module>\n'
          '    run(cfg)\n'
          '  File "/home/u/serve/main.py", line 61, in run\n'
          '    session = load(cfg.model_path)\n'
          '              ^^^^^^^^^^^^^^^^^^^^\n')
RUN_TB = ('Traceback (most recent call last):\n  File "/srv/app/run.py", line 88, in main\n'
          '    stats = summarise(rows)\n  File "/srv/app/run.py", line 31, in summarise\n'
          '    return total / count\n')
MAIN_TB = ('Traceback (most recent call last):\n  File "/srv/job/main.py", line 41, in <module>\n'
           '    main()\n  File "/srv/job/main.py", line 30, in main\n    out = step(batch)\n')
PREP_TB = ('Traceback (most recent call last):\n  File "prep.py", line 40, in main\n'
           '    rows = table[key]\n')


def crash(line: str, before: str = "loading config serve.yaml\nwarmup 3 batches\n") -> str:
    """A log whose program printed `before`, then FRAMES and `line`, its exception."""
    return before + FRAMES + line + "\n"


# ---- progress lines of a run before it failed ----

PROGRESS = "".join(f"step {i} loss {2 / (i + 1):.4f}\n" for i in range(8))
LOSSES = "".join(f"step {i} loss {3.0 / i:.3f}\n" for i in range(1, 30))
LOOP_PROGRESS = "".join(f"step {i} loss {1 / (i + 1):.4f}\n" for i in range(12))
EPOCH_PROGRESS = "".join(f"epoch {i} step {i * 50} loss {1 / (i + 1):.4f}\n" for i in range(10))
TRAINING = "".join(f"epoch 0 | step {i * 50} | loss {2.5 - i * 0.1:.3f}\n" for i in range(6))
STEPS = "".join(f"step {s:5d} | loss {3.0 - s / 1000:.4f}\n" for s in range(100, 600, 100))
SOLVER_PROGRESS = "solver: 512^3 grid, device 0: NVIDIA H100 80GB HBM3\niter 250 residual 3.1e-03\n"


# ---- launchers and collectives ----

# torchrun's agent signalled ({sig}: the signal's name)
AGENT = ("W1130 api.py:753] Received {sig} death signal, shutting down workers\n"
         "W1130 api.py:1028] Sending process 14030 closing signal SIGTERM\n"
         "Traceback (most recent call last):\n"
         '  File "torch/distributed/run.py", line 1032, in <module>\n'
         "torch.distributed.elastic.multiprocessing.api.SignalException: Process 13677 got "
         "signal: {sig}\n")
# a gloo pair's error ({n}: the source line, {msg}: the message)
GLOO = ("[rank0]: RuntimeError: [/opt/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:{n}] "
        "{msg}\n")
NCCL_INIT = "".join(f"n3:4242:4250 [{r}] NCCL INFO comm 0x55d0 rank {r} nranks 2 cudaDev {r} "
                    "busId 1000 commId 0xab - Init COMPLETE\n" for r in range(2))

# The program that prints the driver, collective, NaN-logger and wrapped storage messages of the
# realworld-wordings family (run with the torch CPU venv, TORCH_PY)
MSGS_PROG = Path(__file__).resolve().parents[1] / "corpus/gen/progs/f10_msgs.py"


# ---- Open MPI ----

def orte_lost(remote: str, n: int = 1) -> str:
    """Open MPI 4's help-errmgr-base.txt, once per daemon lost (`n`), the remote daemon on node
    `remote`."""
    bar = "-" * 74 + "\n"
    return (bar + "ORTE has lost communication with a remote daemon.\n\n  HNP daemon   : "
            "[[4242,0],0] on node gpu-11\n  Remote daemon: [[4242,0],1] on node " + remote
            + "\n\nThis is usually due to either a failure of the TCP network\nconnection to "
            "the node, or possibly an internal failure of\nthe daemon itself. We cannot "
            "recover from this failure, and\ntherefore will terminate the job.\n") * n + bar
