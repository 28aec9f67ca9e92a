"""After held-out set 9: the rank that torch.multiprocessing.spawn's launcher names.

mp.spawn runs every rank as a child of one launcher process, so all ranks print into one log
(the Slurm task's): the rank that failed is the one the launcher's exception names - "-- Process
N terminated with the following error:" above the child's traceback (ProcessRaisedException),
"process N terminated with signal SIGSEGV" / "with exit code N" (ProcessExitedException; torch
< 1.8 raised a bare Exception with the same words) - not the Slurm task's rank 0. The child's
own lines still say why (a NaN, a DataLoader worker's death). Wordings written from
torch/multiprocessing/spawn.py, not held-out set 9's lines; one real spawn job too."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from classifylib import TORCH_PY, verdict

PROG = Path(__file__).resolve().parents[1] / "corpus/gen/progs/f9_spawn.py"

LAUNCHER = ('Traceback (most recent call last):\n'
            '  File "/home/u/proj/launch.py", line 41, in <module>\n'
            '    mp.spawn(train, args=(cfg,), nprocs=4)\n'
            '  File "/usr/lib/python3/site-packages/torch/multiprocessing/spawn.py", line 150, '
            'in join\n')


def ranks_log(*lines: str) -> str:
    return ("[rank 0] epoch 0 loss 2.31\n[rank 3] epoch 0 loss 2.29\n"
            "[rank 2] epoch 0 loss 2.30\n[rank 1] epoch 0 loss 2.33\n" + "".join(lines))


def raised(rank: int, child: str, exc: str = "torch.multiprocessing.spawn."
           "ProcessRaisedException") -> str:
    return ranks_log(LAUNCHER, f"{exc}: \n\n-- Process {rank} terminated with the following "
                     "error:\nTraceback (most recent call last):\n"
                     '  File "/home/u/proj/train.py", line 77, in train\n'
                     "    step(batch)\n", child + "\n")


@pytest.mark.parametrize(("text", "cls", "rank"), [
    (raised(2, "ValueError: expected 3 channels, got 4"), "python_exception", 2),
    (raised(3, "FloatingPointError: loss became nan at iteration 812"), "nan_divergence", 3),
    (raised(1, "RuntimeError: DataLoader worker (pid(s) 4242) exited unexpectedly"),
     "dataloader_worker", 1),
    # torch < 1.8: a bare Exception, the same message
    (raised(2, "IndexError: list index out of range", exc="Exception"), "python_exception", 2),
    (ranks_log(LAUNCHER, "torch.multiprocessing.spawn.ProcessExitedException: process 2 "
               "terminated with signal SIGSEGV\n"), "segfault", 2),
    (ranks_log(LAUNCHER, "Exception: process 1 terminated with signal SIGBUS\n"), "segfault", 1),
    (ranks_log(LAUNCHER, "torch.multiprocessing.spawn.ProcessExitedException: process 3 "
               "terminated with signal SIGKILL\n"), "killed", 3),
    (ranks_log(LAUNCHER, "torch.multiprocessing.spawn.ProcessExitedException: process 1 "
               "terminated with exit code 7\n"), "python_exception", 1),
    # a timestamped log: the launcher's "-- " survives the stamp's removal in part
    ("\n".join(f"2026-05-01T10:00:{i:02d}.250Z {x}" for i, x in enumerate(
        raised(2, "KeyError: 'label'").splitlines())) + "\n", "python_exception", 2),
])
def test_spawns_named_process_is_the_root_rank(tmp_path: Path, text: str, cls: str,
                                               rank: int) -> None:
    v = verdict(tmp_path, text)
    assert (v.cls, v.root_rank) == (cls, rank), v.detail


def test_spawn_naming_rank_0_stays_rank_0(tmp_path: Path) -> None:
    v = verdict(tmp_path, raised(0, "KeyError: 'label'"))
    assert (v.cls, v.root_rank) == ("python_exception", 0)


def test_a_process_named_in_prose_is_no_launcher_line(tmp_path: Path) -> None:
    """A line that merely talks about a process (no spawn exception) names no rank."""
    v = verdict(tmp_path, ranks_log("note: process 2 terminated with exit code 0 earlier\n",
                                    "Traceback (most recent call last):\n"
                                    '  File "/home/u/proj/train.py", line 9, in <module>\n'
                                    "KeyError: 'lr'\n"))
    assert (v.cls, v.root_rank) == ("python_exception", 0)


def test_a_real_spawn_job_names_its_failing_middle_rank(tmp_path: Path) -> None:
    """Four ranks under mp.spawn, rank 2 segfaults (ctypes reads address 0)."""
    log = tmp_path / "run.0.log"
    with open(log, "wb") as out:
        p = subprocess.run([TORCH_PY, str(PROG), "spawn", "4", "2", "segv"], stdout=out,
                           stderr=subprocess.STDOUT, timeout=120)
    assert p.returncode == 1
    v = verdict(tmp_path, log.read_text())
    assert (v.cls, v.root_rank) == ("segfault", 2)


# ---- a pool's worker that died: the signal decides when a line names it ----

POOL = ('Traceback (most recent call last):\n'
        '  File "/home/u/feat/extract.py", line 52, in <module>\n'
        '    for r in ex.map(embed, shards):\n'
        '  File "/usr/lib/python3.12/concurrent/futures/_base.py", line 401, in __get_result\n'
        '    raise self._exception\n')
BROKEN = [
    "concurrent.futures.process.BrokenProcessPool: A process in the process pool was "
    "terminated abruptly while the future was running or pending.",
    "concurrent.futures.process.BrokenProcessPool: A child process terminated abruptly, the "
    "process pool is not usable anymore",
]
LOKY = ("joblib.externals.loky.process_executor.TerminatedWorkerError: A worker process managed "
        "by the executor was unexpectedly terminated. This could be caused by a segmentation "
        "fault while calling the function or by an excessive memory usage causing the "
        "Operating System to kill the worker.\n\nThe exit codes of the workers are {codes}\n"
        "Detailed tracebacks of the workers should have been printed to stderr in the executor "
        "process if faulthandler was not disabled.\n")


@pytest.mark.parametrize("line", BROKEN)
def test_a_broken_pool_alone_is_killed_with_low_confidence(tmp_path: Path, line: str) -> None:
    """Any signal ends a worker so: the table's killed, and the detail says what is unknown."""
    v = verdict(tmp_path, "embedding 4096 shards\n" + POOL + line + "\n")
    assert v.cls == "killed" and v.confidence <= 0.5
    assert "does not say" in v.detail and "kernel log" in v.detail


@pytest.mark.parametrize(("kernel", "cls"), [
    ("[1200.5] python3[4242]: segfault at 0 ip 00007f1c2a1b3c4d sp 00007ffd8e2f1a10 error 4 in "
     "libc.so.6[7f1c2a000000+195000]\n", "segfault"),
    ("[1200.5] Out of memory: Killed process 4242 (python3) total-vm:9812345kB, "
     "anon-rss:8123456kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:16000kB "
     "oom_score_adj:0\n", "host_oom"),
])
def test_a_broken_pool_with_the_workers_end_in_the_kernel_log(tmp_path: Path, kernel: str,
                                                              cls: str) -> None:
    v = verdict(tmp_path, "embedding 4096 shards\n" + POOL + BROKEN[0] + "\n", kernel=kernel)
    assert v.cls == cls


def test_a_broken_pool_after_the_workers_faulthandler_report_is_a_segfault(
        tmp_path: Path) -> None:
    v = verdict(tmp_path, "embedding 4096 shards\nFatal Python error: Segmentation fault\n\n"
                "Current thread 0x00007f3c7b6a42c0 (most recent call first):\n"
                '  File "/home/u/feat/extract.py", line 20 in embed\n' + POOL + BROKEN[0] + "\n")
    assert v.cls == "segfault"


@pytest.mark.parametrize(("codes", "cls"), [
    ("{SIGSEGV(-11)}", "segfault"),
    ("{SIGBUS(-7), EXIT(1)}", "segfault"),
    ("{SIGKILL(-9)}", "killed"),
])
def test_lokys_exit_codes_name_the_workers_signal(tmp_path: Path, codes: str, cls: str) -> None:
    v = verdict(tmp_path, "fitting 5 folds\n" + POOL + LOKY.format(codes=codes))
    assert v.cls == cls


def test_a_future_that_mentions_a_broken_pool_in_prose_decides_nothing(tmp_path: Path) -> None:
    """A retry wrapper's note, the job went on and ended well."""
    v = verdict(tmp_path, "retrying: the pool was broken once (BrokenProcessPool), recreated\n"
                "all 4096 shards embedded\n", exit_code=0)
    assert v.cls == "success"


def test_the_childs_exception_is_the_detail_not_the_launchers(tmp_path: Path) -> None:
    v = verdict(tmp_path, raised(2, "ValueError: expected 3 channels, got 4"))
    assert (v.cls, v.root_rank, v.detail) == ("python_exception", 2, "ValueError")
