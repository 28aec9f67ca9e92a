"""The family of classify/rules/20-ranks-and-launchers.yaml: where the failure was. Lines of srun,
mpirun / mpiexec / Hydra, torchrun / elastic, torch.multiprocessing.spawn and concurrent.futures
/ loky pools that name the rank, node or process that failed first, and how a launcher's child
ended (torchrun's agent signalled, a SIGKILL a launcher reports, a KeyboardInterrupt). The
child's own lines still say why; prose that names a process is no launcher line. Pure logic over
small written logs, plus a real spawn job and a real torchrun."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest
from classifylib import (
    AGENT,
    LOSSES,
    TORCH_PY,
    TRAINING,
    job_verdict,
    log_alone,
    need_torch_venv,
    orte_lost,
    run,
    run_verdict,
    task,
    verdict,
    write,
)

from gpualert_slurm.classify import (
    JobFacts,
    TaskInput,
    classify,
)

ELASTIC = ("E0302 10:11:12.000000 4242 torch/distributed/elastic/multiprocessing/api.py:874] "
           "failed (exitcode: -9) local_rank: 1 (pid: 4300) of binary: /venv/bin/python\n"
           "Traceback (most recent call last):\n"
           '  File "/venv/bin/torchrun", line 8, in <module>\n    sys.exit(main())\n'
           '  File "/venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/'
           'errors/__init__.py", line 355, in wrapper\n    return f(*args, **kwargs)\n'
           '  File "/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 919, in '
           'main\n    run(args)\n'
           '  File "/venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line '
           '270, in launch_agent\n    raise ChildFailedError(\n')

SWEEPS = "".join(f"(r{r}) sweep {i} residual {0.5 ** i:.3e}\n" for i in range(4) for r in range(4))

BAR = "-" * 74 + "\n"

PRIMARY = (BAR + "Primary job  terminated normally, but 1 process returned\n"
           "a non-zero exit code. Per user-direction, the job has been aborted.\n" + BAR)

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


def _task(tmp_path, name, text, rank, node, step, code=None, sig=None, end=None):
    return TaskInput(write(tmp_path, name, text), rank=rank, node=node, step=step,
                     exit_code=code, signal=sig, end_time=end)


@pytest.mark.parametrize("sig,cls", [(15, "killed"), (1, "killed"), (2, "cancelled")])
def test_torchrun_agent_signalled(tmp_path: Path, sig: int, cls: str) -> None:
    assert job_verdict([task(tmp_path, AGENT.format(sig=sig))]).cls == cls


def test_keyboard_interrupt_is_cancelled_like_but_not_on_clean_exit(tmp_path):
    t = run(tmp_path, """
        import os, signal, time
        print('epoch 1', flush=True)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
        """)
    assert "KeyboardInterrupt" in Path(t.path).read_text()
    assert run_verdict(t).cls == "cancelled"
    t2 = run(tmp_path, """
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            import traceback; traceback.print_exc()
        """, name="1.0.log")
    assert t2.exit_code == 0
    assert classify([t2], JobFacts(exit_code=0)).cls == "success"


# ---- a SIGKILL a launcher reports: killed, host_oom with memory words (was: python_exception)

def test_a_launchers_cut_traceback_after_exitcode_9_is_a_kill(tmp_path: Path) -> None:
    v = verdict(tmp_path, TRAINING + ELASTIC, exit_code=None)
    assert v.cls == "killed", v.detail


def test_a_kill_with_memory_words_is_the_oom_killer(tmp_path: Path) -> None:
    mem = "step 300 | host RAM used: 61.8 GB / 64.0 GB (96%)\n"
    v = verdict(tmp_path, TRAINING + mem + ELASTIC, exit_code=None)
    assert v.cls == "host_oom" and v.decided_by == "killed_memory", v.detail
    # GPU memory is not the host's
    for gpu in ("step 300 | cuda max_memory_allocated 61.8 GB\n", "step 300 | GPU RAM: 61.8 GB\n",
                "step 300 | CUDA memory used: 70.1 GiB\n", "step 300 | VRAM 23.5 GB\n"):
        assert verdict(tmp_path, TRAINING + gpu + ELASTIC, exit_code=None).cls == "killed", gpu


@pytest.mark.parametrize(("say", "cls"), [("", "killed"),
                                          ("print('rank 1 RSS 3.9 GB', flush=True)", "host_oom")])
def test_real_torchrun_rank_sigkilled(tmp_path: Path, say: str, cls: str) -> None:
    need_torch_venv()
    prog = tmp_path / "job.py"
    prog.write_text(textwrap.dedent(f"""\
        import os, signal, time
        r = int(os.environ["RANK"])
        print(f"rank {{r}} epoch 0 step 0", flush=True)
        if r == 1:
            {say or 'pass'}
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(30)
    """))
    torchrun = Path(TORCH_PY).parent / "torchrun"
    log = tmp_path / "run.0.log"
    with open(log, "wb") as out:
        p = subprocess.run([str(torchrun), "--nproc-per-node", "2", "--monitor-interval", "0.2",
                            str(prog)], stdout=out, stderr=subprocess.STDOUT, timeout=120)
    assert p.returncode != 0 and "exitcode: -9" in log.read_text()
    v = classify([TaskInput(str(log), rank=0, step="0", exit_code=p.returncode)],
                 JobFacts(exit_code=p.returncode))
    assert v.cls == cls, v.detail
    # the log cut inside the launcher's traceback, as pasted: the same
    text = log.read_text()
    cut = text[:text.index("raise ChildFailedError") + len("raise ChildFailedError")] + "\n"
    assert log_alone(tmp_path, cut) == cls


# ---- where, when why is unknown or a job-level state ----

def test_unknown_names_the_rank_srun_names(tmp_path: Path) -> None:
    t0 = task(tmp_path, "rank 0 part 1\n", name="0.0.log", rank=0, exit_code=0, step="0",
              node="n1", end_time=20.0)
    t1 = task(tmp_path, "rank 1 part 1\n", name="0.1.log", rank=1, exit_code=4, step="0",
              node="n2", end_time=10.0)
    b = task(tmp_path, "rank 0 part 1\nsrun: error: n2: task 1: Exited with exit code 4\n",
             name="batch.0.log", rank=0, exit_code=4, step="batch", node="n1", end_time=21.0)
    v = classify([b, t0, t1], JobFacts(exit_code=4, slurm_state="FAILED"))
    assert v.cls == "unknown" and v.root_rank == 1 and v.root_node == "n2"


def test_unknown_without_a_naming_line_names_no_rank(tmp_path: Path) -> None:
    v = job_verdict([task(tmp_path, "rows 12\n", exit_code=3)])
    assert v.cls == "unknown" and v.root_rank is None


# ---- the MPI launcher names the failing rank ----

@pytest.mark.parametrize("text, cls, rank, node", [
    (PRIMARY + BAR + "mpirun noticed that process rank 3 with PID 81234 on node gpu-b07 exited on "
     "signal 7 (Bus error).\n" + BAR, "segfault", 3, "gpu-b07"),
    (PRIMARY + BAR + "mpiexec noticed that process rank 2 with PID 0 on node n12 exited on signal "
     "11.\n" + BAR, "segfault", 2, None),
    (PRIMARY + BAR + "prterun detected that one or more processes exited with non-zero status, "
     "thus causing\nthe job to be terminated. The first process to do so was:\n\n"
     "   Process name: [prterun-login1-5512@1,2]\n   Exit code:    7\n" + BAR, "unknown", 2, None),
    (BAR + "mpirun has exited due to process rank 5 with PID 4411 on\nnode c3 calling \"abort\". "
     "This may have caused other processes\nin the application to be terminated by signals "
     "sent by mpirun\n(as reported here).\n" + BAR, "unknown", 5, None),
    (PRIMARY + "mpirun noticed that process rank 1 with PID 77 on node a17 exited on signal 15 "
     "(Terminated).\n", "unknown", 1, None),
    ("=" * 83 + "\n=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
     "=   RANK 6 PID 30917 RUNNING AT gpu-n04\n=   KILLED BY SIGNAL: 11 (Segmentation fault)\n"
     + "=" * 83 + "\n", "segfault", 6, None),
    ("=" * 83 + "\n=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
     "=   PID 30917 RUNNING AT gpu-n04\n=   EXIT CODE: 139\n=   CLEANING UP REMAINING PROCESSES\n",
     "segfault", None, None),
])
def test_mpi_launcher_names_the_failed_rank(tmp_path, text, cls, rank, node):
    v = verdict(tmp_path, SWEEPS + text, exit_code=1)
    assert v.cls == cls, (v.cls, v.detail)
    assert v.root_rank == (0 if rank is None else rank), v.root_rank
    if node:
        assert v.root_node == node


def test_process_name_needs_mpiruns_headline(tmp_path):
    """A "Process name:" line of another report (a lost communication path) is no claim that
    that rank failed first: the Slurm task stays the root."""
    text = SWEEPS + "A critical communication path was lost to:\n\n  My name:      [[9,1],0]\n" \
        "  Process name: [[9,1],3]\n  Node:         n4\n"
    v = verdict(tmp_path, text, exit_code=1)
    assert v.root_rank != 3


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


# ---- the failing rank and node from Slurm's and the launchers' words --------------------------

def test_srun_out_of_memory_names_the_killed_rank_not_the_batch_task(tmp_path):
    tasks = [
        _task(tmp_path, "batch.0.log", "srun: error: n2: task 1: Out Of Memory\nsrun: error: "
              "n1: task 0: Terminated\n", 0, "n1", "batch", code=1, end=30.0),
        _task(tmp_path, "0.0.log", LOSSES + "RuntimeError: [gloo/transport/tcp/pair.cc:534] "
              "Connection closed by peer [10.0.0.2]:27018\n", 0, "n1", "0", sig=15, end=20.0),
        _task(tmp_path, "0.1.log", LOSSES, 1, "n2", "0", sig=9, end=10.0),
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
        *[_task(tmp_path, f"0.{r}.log", LOSSES, r, f"n{r + 1}", "0", sig=15, end=21.0)
          for r in (0, 1)],
        _task(tmp_path, "0.2.log", LOSSES[:100], 2, "n3", "0", sig=11, end=20.0),
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
    tasks = [_task(tmp_path, "batch.0.log", LOSSES + "Traceback (most recent call last):\n"
                   "ValueError: bad\n", 0, "n1", "batch", code=1, end=10.0)]
    v = classify(tasks, JobFacts(exit_code=1))
    assert (v.cls, v.root_rank) == ("python_exception", None)


def test_srun_naming_the_first_task_beats_a_peer_error_in_its_own_log(tmp_path):
    """Rank 1 is OOM-killed first (exit record: SIGKILL at t=10); rank 0 then fails in NCCL
    (its own log, t=20). srun's task line and the records make rank 1 the root."""
    tasks = [
        _task(tmp_path, "batch.0.log", "srun: error: n2: task 1: Out Of Memory\nsrun: error: "
              "n1: task 0: Exited with exit code 1\n", 0, "n1", "batch", code=1, end=30.0),
        _task(tmp_path, "0.0.log", LOSSES + "torch.distributed.DistBackendError: NCCL error in: "
              "ProcessGroupNCCL.cpp:1970, unhandled system error\n", 0, "n1", "0", code=1,
              end=20.0),
        _task(tmp_path, "0.1.log", LOSSES, 1, "n2", "0", sig=9, end=10.0),
    ]
    v = classify(tasks, JobFacts(exit_code=1))
    assert (v.cls, v.root_rank, v.root_node) == ("host_oom", 1, "n2")
    assert any(c.cls == "nccl_error" and c.rank == 0 for c in v.cascades)


def test_mpirun_names_the_rank_and_node_that_died(tmp_path):
    path = write(tmp_path, "batch.0.log", LOSSES + "[n2:04242] *** Process received signal ***\n"
                 "[n2:04242] Signal: Segmentation fault (11)\n-------------------------------\n"
                 "mpirun noticed that process rank 3 with PID 4242 on node n2 exited on signal 11 "
                 "(Segmentation fault).\n")
    v = classify([TaskInput(path, rank=0, node="n1", step="batch", exit_code=139)],
                 JobFacts(exit_code=139))
    assert (v.cls, v.root_rank, v.root_node) == ("segfault", 3, "n2")


# ---- a traceback cut after a launcher passed on an interrupt ----
# Pasted excerpts, a log killed mid-write and a bounded tail stop inside a traceback. Where the
# last frames or the launcher's line just before say what raised, the class is theirs; the
# lines below are real programs' output (a real pickle, torch.save, torchrun), cut afterwards.

TORCHRUN_WAITING = """\
    import os, queue, time
    print(f"rank {os.environ['RANK']} epoch 0 step 0", flush=True)
    q = queue.Queue()
    def next_batch():
        return q.get(timeout=600)
    next_batch()
"""


def test_a_traceback_cut_after_torchrun_passed_on_sigint_is_cancelled(tmp_path: Path) -> None:
    need_torch_venv()
    # (was: python_exception) torchrun got SIGINT (Ctrl-C) and passed it on; the worker's
    # KeyboardInterrupt traceback cut before its last line: the job was interrupted
    import signal
    import time
    prog = tmp_path / "job.py"
    prog.write_text(textwrap.dedent(TORCHRUN_WAITING))
    log = tmp_path / "out.txt"
    with open(log, "wb") as out:
        p = subprocess.Popen([str(Path(TORCH_PY).parent / "torchrun"), "--nproc-per-node", "1",
                              "--monitor-interval", "0.2", str(prog)], stdout=out,
                             stderr=subprocess.STDOUT)
        for _ in range(600):
            if "epoch 0 step 0" in log.read_text():
                break
            time.sleep(0.1)
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)
    text = log.read_text()
    assert "Received 2 death signal" in text and "KeyboardInterrupt" in text
    assert log_alone(tmp_path, text) == "cancelled"  # held before: the whole log
    cut = text[:text.index("    return q.get(timeout=600)\n")] + "\n"
    assert "KeyboardInterrupt" not in cut
    assert log_alone(tmp_path, cut) == "cancelled"


@pytest.mark.parametrize("notice,cls", [
    ("srun: sending Ctrl-C to StepId=8812.0\n", "cancelled"),
    ("srun: sending Ctrl-C to job 8812.0\n", "cancelled"),
    # SIGTERM is a cancel, a time limit or a preemption: the cut traceback says no more
    ("WARNING:torch.distributed.elastic.agent.server.api:Received 15 death signal, shutting "
     "down workers\n", "python_exception"),
    ("", "python_exception"),
])
def test_cut_traceback_after_a_launchers_interrupt(tmp_path: Path, notice: str, cls: str) -> None:
    tb = ("Traceback (most recent call last):\n  File \"train.py\", line 88, in <module>\n"
          "    for batch in loader:\n  File \"/opt/conda/lib/python3.11/site-packages/torch/utils"
          "/data/dataloader.py\", line 1328, in _next_data\n    idx, data = self._get_data()\n")
    assert log_alone(tmp_path, TRAINING + notice + tb) == cls


# ---- Open MPI losing a daemon its transport had just said was killed (was: node_failure) ----
# (the loss without the kill: tests/test_classify_schedulers.py)

@pytest.mark.parametrize("kill,n", [
    ("srun: error: gpu-12: task 1: Killed\n", 1),
    ("command terminated with exit code 137\n", 2),
])
def test_a_daemon_killed_then_lost_is_killed(tmp_path: Path, kill: str, n: int) -> None:
    assert log_alone(tmp_path, TRAINING + kill + orte_lost("gpu-12", n)) == "killed"


# ---- Ray's driver printing its workers' lines ----

@pytest.mark.parametrize("prefix", ["(pid=51877) ", "(pid=51877, ip=10.40.2.9) ",
                                    "(RayTrainWorker pid=51877, ip=10.40.2.9) ",
                                    "(preprocess_shard pid=51877) "])
def test_ray_worker_prefixes_are_launcher_prefixes(tmp_path: Path, prefix: str) -> None:
    """A worker's traceback as Ray's driver prints it, each line behind "(name pid=N, ip=A)":
    rules that read a line from its start (a bare "MemoryError") see the message (was:
    unknown); a rank prefix behind it still names the rank."""
    tb = ('Traceback (most recent call last):\n  File "/srv/app/shard.py", line 31, in run\n'
          "    table = load(part)\nMemoryError\n")
    text = "".join(prefix + ln + "\n" for ln in (TRAINING + tb).splitlines())
    assert log_alone(tmp_path, text) == "host_oom"
    ranked = "".join(f"{prefix}[rank5]: {ln}\n" for ln in tb.splitlines())
    v = classify([TaskInput(write(tmp_path, "ray.log", TRAINING + ranked))], JobFacts())
    assert v.cls == "host_oom" and v.root_rank == 5, v.to_json()
