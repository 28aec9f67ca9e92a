"""Issue 22 (f10k-): how a job ended when the scheduler, a cloud, Kubernetes or Ray ended it, when
a launcher only reports a SIGKILL, and when the log just stops.

Each family failed before its fix (the verdict named above each group is what it was). The
wordings are written from the tools' own sources and documents (Slurm 22.05's libslurmfull
strings, IBM Spectrum LSF's termination reasons, Ray's GCS death causes, glibc's libc.mo,
CPython's faulthandler, torch.distributed.elastic), not copied from the real-world set; the
torchrun, bash and faulthandler cases run the real thing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from classifylib import TORCH_PY, verdict

from gpualert_slurm.classify import JobFacts, TaskInput, classify

PROGRESS = "".join(f"epoch 0 | step {i * 50} | loss {2.5 - i * 0.1:.3f}\n" for i in range(6))


def log_alone(tmp_path: Path, text: str) -> str:
    """The class of a log given alone (no exit status), as a pasted log is scored."""
    return verdict(tmp_path, text, exit_code=None).cls


# ---- Slurm's own memory verdict outranks the kill (was: cancelled / cuda_setup) ----

@pytest.mark.parametrize("text", [
    PROGRESS + "slurmstepd: error: StepId=4242.batch exceeded memory limit (913412096 > "
    "524288000), being killed\nslurmstepd: error: Exceeded job memory limit\n"
    "slurmstepd: error: *** JOB 4242 ON n2 CANCELLED AT 2026-03-04T05:06:07 ***\n" + PROGRESS,
    # older releases name the job
    PROGRESS + "slurmstepd: error: Job 77 exceeded memory limit (2048000 > 1024000), being "
    "killed\nslurmstepd: error: *** JOB 77 ON cn07 CANCELLED AT 2026-03-04T05:06:07 ***\n",
    # a framework's warning on a CPU node, then the cgroup's report
    "2026-03-04 05:06:07.123456: W external/xla/xla/stream_executor/cuda/cuda_driver.cc:282] "
    "failed call to cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected\n"
    + PROGRESS + "/var/spool/slurmd/job00042/slurm_script: line 9: 31337 Killed    python "
    "train.py\nslurmstepd: error: Detected 1 oom-kill event(s) in StepId=42.batch. Some of your "
    "processes may have been killed by the cgroup out-of-memory handler.\n",
])
def test_slurms_memory_verdict_beats_its_cancel_line(tmp_path: Path, text: str) -> None:
    v = verdict(tmp_path, text, exit_code=None)
    assert v.cls == "host_oom", v.detail
    assert v.step == "host_oom_state" and "verdict" in v.detail


def test_a_step_over_its_memory_at_some_point_that_succeeded_stays_success(
        tmp_path: Path) -> None:
    v = verdict(tmp_path, PROGRESS + "slurmstepd: error: Exceeded step memory limit at some "
                "point.\n", exit_code=0)
    assert v.cls == "success"


# ---- an error the job survived, then Slurm's end (was: the earlier error's class) ----

BARS = "\r".join(f"{p:3d}%|{'#' * (p // 10):10s}| {p // 2}/50 [1{p // 10}:00<2:00:00, "
                 "600.00s/it]" for p in range(0, 60, 8))


@pytest.mark.parametrize(("end", "cls"), [
    ("slurmstepd: error: *** JOB 51 ON n3 CANCELLED AT 2026-02-01T10:11:12 DUE TO TIME LIMIT ***",
     "time_limit"),
    ("slurmstepd: error: *** JOB 51 ON n3 CANCELLED AT 2026-02-01T10:11:12 ***", "cancelled"),
])
def test_an_error_the_job_went_on_after_is_no_cause_of_its_end(tmp_path: Path, end: str,
                                                               cls: str) -> None:
    text = ("FileNotFoundError: [Errno 2] No such file or directory: 'prep/cache.json'\n"
            "/opt/app/train.py:40: RuntimeWarning: divide by zero encountered in log\n"
            "  w = np.log(counts)\n" + BARS + end + "\n")
    assert log_alone(tmp_path, text) == cls


def test_a_warning_right_before_the_time_limit_is_no_cause(tmp_path: Path) -> None:
    # (was: cuda_setup) a framework's warning-level line on a CPU node, then Slurm's limit
    text = (PROGRESS + "2026-02-01 10:11:11.000000: W external/xla/xla/stream_executor/cuda/"
            "cuda_driver.cc:282] failed call to cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable "
            "device is detected\nslurmstepd: error: *** JOB 5 ON n1 CANCELLED AT "
            "2026-02-01T10:11:12 DUE TO TIME LIMIT ***\n")
    assert log_alone(tmp_path, text) == "time_limit"


def test_an_error_right_before_the_time_limit_still_is_the_cause(tmp_path: Path) -> None:
    text = (PROGRESS + "Traceback (most recent call last):\n  File \"train.py\", line 9, in "
            "<module>\n    load()\nFileNotFoundError: [Errno 2] No such file or directory: "
            "'shard-7.bin'\nslurmstepd: error: *** JOB 5 ON n1 CANCELLED AT 2026-02-01T10:11:12 "
            "DUE TO TIME LIMIT ***\n")
    assert log_alone(tmp_path, text) == "file_not_found"


# ---- LSF's job report (was: unknown, or a distractor's class) ----

LSF_HEAD = ("\n------------------------------------------------------------\n"
            "Sender: LSF System <lsfadmin@gpu-17>\nSubject: Job 991: <train> in cluster <c1> "
            "Exited\n\nJob <train> was submitted from host <login1> by user <u1>.\n")


@pytest.mark.parametrize(("reason", "cls"), [
    ("TERM_RUNLIMIT: job killed after reaching LSF run time limit.", "time_limit"),
    ("TERM_OWNER: job killed by owner.", "cancelled"),
    ("TERM_ADMIN: job killed by root or LSF administrator.", "cancelled"),
    ("TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.", "host_oom"),
    ("TERM_PREEMPT: job killed after preemption.", "preempted"),
])
def test_lsfs_termination_reason_decides(tmp_path: Path, reason: str, cls: str) -> None:
    text = (PROGRESS + "/opt/app/x.py:3: UserWarning: FileNotFoundError: [Errno 2] No such file "
            "or directory: 'ldconfig'\n" + LSF_HEAD + f"\n{reason}\nExited with exit code 140.\n")
    assert log_alone(tmp_path, text) == cls


# ---- preemption and node loss as Slurm's requeue, clouds, Kubernetes and Ray say it ----

@pytest.mark.parametrize(("text", "cls"), [
    # submitit's handler, then Slurm's requeue line (was: cancelled)
    ("submitit WARNING (2026-01-01 01:02:03,456) - Caught signal SIGUSR2 on n4: this job is "
     "preempted.\nslurmstepd: error: *** JOB 9 ON n4 CANCELLED AT 2026-01-01T01:02:04 DUE TO JOB "
     "REQUEUE ***\nsrun: error: n4: tasks 0-1: Exited with exit code 1\n", "preempted"),
    ("I 03-02 10:11:12 controller.py:95] The cluster is preempted.\n"
     "E 03-02 10:11:40 backend_utils.py:990] Failed to cancel jobs on cluster c-7.\n", "preempted"),
    ("2026-03-02T10:11:12Z start-worker GCE metadata says termination is imminent\n", "preempted"),
    ("Warning  Preempted  pod/trainer-0  Preempted by ml/urgent-job on node gpu-node-3\n",
     "preempted"),
    ("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
     "The actor died because its node has died. Node Id: 4f2a\n"
     "\tthe actor's node was preempted: spot capacity reclaimed\n", "preempted"),
    # node loss (was: python_exception / unknown)
    ("ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.\n"
     "The actor is dead because its node has died. Node Id: 9c1d\n", "node_failure"),
    ("The node with client ID 7e21 has been marked dead because the monitor has missed too many "
     "heartbeats from it.\n", "node_failure"),
    ("Status reason: Host EC2 (instance i-0abc123def4567890) terminated.\n", "node_failure"),
    # Kubernetes' node controller and a Job's deadline (was: unknown)
    ("Reason:  NodeLost\nMessage: Node gpu-pool-7 which was running pod trainer-3 is "
     "unresponsive\n", "node_failure"),
    ("  Warning  DeadlineExceeded  job/finetune-llm  Job was active longer than specified "
     "deadline\n", "time_limit"),
    ("statusReason: Job attempt duration exceeded timeout\n", "time_limit"),
    ("Normal  Preempted  pod/trainer-1  Preempted by pod 7b3c2f1e-aa10 on node gpu-node-2\n",
     "preempted"),
    ("Reason: Evicted\nMessage: The node was low on resource: ephemeral-storage. Container "
     "trainer was using 120Gi, which exceeds its request of 0.\n", "disk_full"),
    ("2026-05-01 10:00:00 WARNING azureml: the job was preempted (low-priority VM reclaimed)\n",
     "preempted"),
])
def test_preemption_and_node_loss_wordings(tmp_path: Path, text: str, cls: str) -> None:
    assert log_alone(tmp_path, text) == cls


def test_a_stuck_nccl_watchdog_is_a_hang(tmp_path: Path) -> None:
    stuck = ("[rank1]:[E501 10:11:12.000000000 ProcessGroupNCCL.cpp:1495] [PG ID 0 PG GUID 0 "
             "Rank 1] Heartbeat monitor timed out! Process will be terminated after dumping "
             "debug info. workMetaList_.size()=1\n"
             "[rank1]:[F501 10:11:12.000000000 ProcessGroupNCCL.cpp:1500] [PG ID 0 PG GUID 0 "
             "Rank 1] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making "
             "progress in monitoring enqueued collectives. This typically indicates a NCCL/CUDA "
             "API (e.g., CudaEventDestroy) hang blocking the watchdog\n")
    assert log_alone(tmp_path, PROGRESS + stuck) == "hang"
    # the collective timeout the watchdog caught first decides
    first = ("[rank1]:[E501 10:01:12.000000000 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught "
             "collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=4, "
             "NumelOut=4, Timeout(ms)=600000) ran for 600071 milliseconds before timing out.\n")
    assert log_alone(tmp_path, PROGRESS + first + stuck) == "collective_timeout"


def test_a_sentence_about_what_preemption_would_do_is_no_preemption(tmp_path: Path) -> None:
    text = "INFO checkpointing every 500 steps so that if the node is preempted we resume\n"
    assert verdict(tmp_path, text + PROGRESS, exit_code=0).cls == "success"
    assert log_alone(tmp_path, text + PROGRESS) == "unknown"


# ---- a SIGKILL a launcher reports: killed, host_oom with memory words (was: python_exception)

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


def test_a_launchers_cut_traceback_after_exitcode_9_is_a_kill(tmp_path: Path) -> None:
    v = verdict(tmp_path, PROGRESS + ELASTIC, exit_code=None)
    assert v.cls == "killed", v.detail


def test_a_kill_with_memory_words_is_the_oom_killer(tmp_path: Path) -> None:
    mem = "step 300 | host RAM used: 61.8 GB / 64.0 GB (96%)\n"
    v = verdict(tmp_path, PROGRESS + mem + ELASTIC, exit_code=None)
    assert v.cls == "host_oom" and v.step == "killed_memory", v.detail
    # GPU memory is not the host's
    for gpu in ("step 300 | cuda max_memory_allocated 61.8 GB\n", "step 300 | GPU RAM: 61.8 GB\n",
                "step 300 | CUDA memory used: 70.1 GiB\n", "step 300 | VRAM 23.5 GB\n"):
        assert verdict(tmp_path, PROGRESS + gpu + ELASTIC, exit_code=None).cls == "killed", gpu


@pytest.mark.skipif(not Path(TORCH_PY).exists(), reason="needs the torch venv (make test)")
@pytest.mark.parametrize(("say", "cls"), [("", "killed"),
                                          ("print('rank 1 RSS 3.9 GB', flush=True)", "host_oom")])
def test_real_torchrun_rank_sigkilled(tmp_path: Path, say: str, cls: str) -> None:
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


# ---- the shell's Killed in the locale's words (was: unknown) ----

@pytest.mark.parametrize("lang", ["zh_CN", "de", "ru", "ko"])
def test_real_bash_killed_in_its_locale(tmp_path: Path, lang: str) -> None:
    if not Path(f"/usr/share/locale/{lang}/LC_MESSAGES/libc.mo").exists():
        pytest.skip(f"no glibc messages for {lang}")
    log = tmp_path / "run.0.log"
    env = dict(os.environ, LANGUAGE=lang, LANG="C.UTF-8", LC_ALL="")
    # (not the script's last command: bash would exec it and print nothing)
    script = (f"echo 'epoch 3 loss 0.41'; {sys.executable} -c 'import os; os.kill(os.getpid(), "
              "9)'; exit $?")
    with open(log, "wb") as out:
        p = subprocess.run(["bash", "-c", script], stdout=out, stderr=subprocess.STDOUT, env=env,
                           timeout=30)
    assert p.returncode == 137
    text = log.read_text()
    assert "Killed" not in text  # the message is in the locale's words
    assert log_alone(tmp_path, text) == "killed"
    # bare, as an interactive shell prints it
    word = re.search(r"\d+ (\S+(?: \S+)?) {2,}", text.strip().splitlines()[-1]).group(1)
    assert log_alone(tmp_path, "epoch 3 loss 0.41\n" + word + "\n") == "killed"


def test_killed_drawn_over_a_progress_line(tmp_path: Path) -> None:
    assert log_alone(tmp_path, "Loading data\nKilledg batch 12000 / 90000\n") == "killed"
    assert log_alone(tmp_path, "epoch 1 done\nKilled workers are restarted\n") != "killed"


# ---- hangs (was: unknown) ----

def test_a_py_spy_dump_is_a_hang(tmp_path: Path) -> None:
    text = ('Process 4242: python train.py\nPython v3.11.4 (/usr/bin/python3.11)\n\n'
            'Thread 4242 (idle): "MainThread"\n    wait (threading.py:320)\n'
            '    all_reduce (torch/distributed/distributed_c10d.py:2501)\n'
            'Thread 4300 (idle): "pt_autograd_0"\n')
    assert log_alone(tmp_path, text) == "hang"


def test_real_faulthandler_timeout_is_a_hang(tmp_path: Path) -> None:
    log = tmp_path / "run.0.log"
    code = ("import faulthandler, threading, time\nprint('step 0', flush=True)\n"
            "faulthandler.dump_traceback_later(1, exit=True)\nthreading.Event().wait()\n")
    with open(log, "wb") as out:
        p = subprocess.run([sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT,
                           timeout=30)
    assert p.returncode != 0 and "Timeout (0:00:01)!" in log.read_text()
    v = classify([TaskInput(str(log), rank=0, step="0", exit_code=p.returncode)],
                 JobFacts(exit_code=p.returncode))
    assert v.cls == "hang", v.detail


NCCL_INIT = "".join(f"n3:4242:4250 [{r}] NCCL INFO comm 0x55d0 rank {r} nranks 2 cudaDev {r} "
                    "busId 1000 commId 0xab - Init COMPLETE\n" for r in range(2))


def test_a_log_that_stops_after_nccl_init_hung(tmp_path: Path) -> None:
    v = verdict(tmp_path, PROGRESS + NCCL_INIT, exit_code=None)
    assert v.cls == "hang" and v.step == "silent_end" and "stops" in v.detail
    assert verdict(tmp_path, PROGRESS + NCCL_INIT, exit_code=0).cls == "success"
    # more work after the init: no hang there
    assert log_alone(tmp_path, NCCL_INIT + PROGRESS) == "unknown"


def test_nccl_init_then_the_end_line_is_a_hang(tmp_path: Path) -> None:
    end = ("W0501 20:00:00.000000 77 torch/distributed/elastic/agent/server/api.py:719] Received "
           "15 death signal, shutting down workers\n")
    v = verdict(tmp_path, PROGRESS + NCCL_INIT + end, exit_code=None)
    assert v.cls == "hang" and "collective" in v.detail, v.detail
    # an error between: that error decides, not a hang
    err = ("n3:4242:4250 [1] NCCL WARN Call to ibv_modify_qp failed with error Connection "
           "timed out\n")
    assert log_alone(tmp_path, PROGRESS + NCCL_INIT + err + end) != "hang"
    # work between: the end line's class
    assert log_alone(tmp_path, NCCL_INIT + PROGRESS + end) != "hang"


@pytest.mark.parametrize("end,cls", [
    ("slurmstepd: error: *** JOB 12 ON n4 CANCELLED AT 2026-05-01T20:00:00 DUE TO TIME LIMIT "
     "***\n", "time_limit"),
    ("slurmstepd: error: *** STEP 12.0 ON n4 CANCELLED AT 2026-05-01T20:00:00 ***\n"
     "slurmstepd: error: *** JOB 12 ON n4 CANCELLED AT 2026-05-01T20:00:00 ***\n", "cancelled"),
])
def test_nccl_init_then_slurms_end_line_is_slurms_word(tmp_path: Path, end: str, cls: str
                                                       ) -> None:
    # issue 32: Slurm's own end line outranks the inferred hang (was: hang)
    assert log_alone(tmp_path, PROGRESS + NCCL_INIT + end) == cls


def timed(hh: int, mm: int, text: str) -> str:
    return f"[2026-05-01 {hh:02d}:{mm:02d}:00,120] [INFO] {text}\n"


def test_timestamps_that_stop_long_before_the_end_line_are_a_hang(tmp_path: Path) -> None:
    lines = "".join(timed(9, m, f"step {m * 10} loss 1.{m:02d}") for m in range(0, 30, 2))
    # a launcher's timed stop line 4 h after the last step: the log's stamps show the hang
    stop = ("[2026-05-01 13:30:00,001] torch.distributed.elastic.agent.server.api: [WARNING] "
            "Received 15 death signal, shutting down workers\n")
    v = verdict(tmp_path, lines + stop, exit_code=None)
    assert v.cls == "hang" and "timestamps" in v.detail, v.detail
    # issue 32: Slurm's own time-limit line outranks that inference (was: hang)
    end = ("slurmstepd: error: *** JOB 8 ON n2 CANCELLED AT 2026-05-01T13:30:00 DUE TO TIME "
           "LIMIT ***\n")
    assert log_alone(tmp_path, lines + end) == "time_limit"
    # a log that writes once an hour: 1.5 h of quiet before the limit is its own pace
    hourly = "".join(timed(h, 0, f"epoch {h} loss 0.{h}") for h in range(3, 12))
    late = end.replace("13:30:00", "13:30:00")
    assert log_alone(tmp_path, hourly + late) == "time_limit"
    # output up to the end: the time limit
    assert log_alone(tmp_path, lines + timed(13, 29, "step 999") + end) == "time_limit"
    # untimed output after the last timed line (a progress bar, a loop's prints): it went on
    untimed = "".join(f"step {i} loss 0.5\n" for i in range(5))
    assert log_alone(tmp_path, lines + untimed + end) == "time_limit"


def test_timestamps_that_stop_long_before_a_kill_line_are_a_hang(tmp_path: Path) -> None:
    lines = "".join(timed(9, m, f"step {m * 10} loss 1.{m:02d}") for m in range(0, 30, 2))
    end = ("W0501 14:02:00.000000 77 torch/distributed/elastic/agent/server/api.py:719] Received "
           "15 death signal, shutting down workers\n")
    v = verdict(tmp_path, lines + end, exit_code=None)
    assert v.cls == "hang" and "timestamps" in v.detail, v.detail
    assert log_alone(tmp_path, lines + timed(14, 1, "step 999") + end) != "hang"


# ---- a multi-node launcher's shutdown after a peer died, then CANCELLED (was: cancelled) ----

def test_a_lost_peer_before_the_cancel_line_is_the_cause(tmp_path: Path) -> None:
    text = (PROGRESS + "gpu-2:5151:5190 [1] NCCL INFO [Service thread] Connection closed by "
            "localRank 1\n[2026-05-01 10:00:03,000] [INFO] [launch.py:319:sigkill_handler] "
            "Killing subprocess 5151\nslurmstepd: error: *** JOB 31 ON gpu-2 CANCELLED AT "
            "2026-05-01T10:00:04 ***\n")
    assert log_alone(tmp_path, text) == "nccl_error"
    # the lines after Slurm's cancel are its consequence
    after = (PROGRESS + "slurmstepd: error: *** JOB 31 ON gpu-2 CANCELLED AT 2026-05-01T10:00:04 "
             "***\ngpu-2:5151:5190 [1] NCCL INFO [Service thread] Connection closed by "
             "localRank 1\n")
    assert log_alone(tmp_path, after) == "cancelled"


DS_SHUTDOWN = ("[2026-05-01 10:00:05,000] [INFO] [launch.py:315:sigkill_handler] Killing "
               "subprocess 5151\n[2026-05-01 10:00:05,100] [ERROR] [launch.py:321:sigkill_handler] "
               "['/usr/bin/python', '-u', 'train.py', '--local_rank=1'] exits with return code = "
               "-15\nsubprocess.CalledProcessError: Command '['/usr/bin/python', '-u', 'train.py', "
               "'--local_rank=1']' died with <Signals.SIGTERM: 15>.\n")
CANCEL = "slurmstepd: error: *** JOB 31 ON gpu-2 CANCELLED AT 2026-05-01T10:00:04 ***\n"


def test_deepspeeds_shutdown_after_the_cancel_is_no_python_exception(tmp_path: Path) -> None:
    # (was: python_exception, the launcher's CalledProcessError)
    assert log_alone(tmp_path, PROGRESS + CANCEL + DS_SHUTDOWN) == "cancelled"
    peer = ("gpu-2:5151:5190 [1] NCCL INFO [Service thread] Connection closed by localRank 0\n")
    assert log_alone(tmp_path, PROGRESS + peer + CANCEL + DS_SHUTDOWN) == "nccl_error"
    # a rank's own error before it decides
    own = ("Traceback (most recent call last):\n  File \"train.py\", line 80, in <module>\n"
           "    loss.backward()\nRuntimeError: CUDA error: an illegal memory access was "
           "encountered\n")
    assert log_alone(tmp_path, PROGRESS + own + DS_SHUTDOWN + CANCEL) == "cuda_error"


# ---- other frameworks' workers lost to memory (was: python_exception / killed) ----

@pytest.mark.parametrize("text", [
    "distributed.nanny.memory - WARNING - Worker tcp://127.0.0.1:40111 (pid=5150) exceeded 95% "
    "memory budget. Restarting...\ndistributed.nanny - WARNING - Restarting worker\n"
    "Traceback (most recent call last):\n  File \"etl.py\", line 30, in <module>\n    "
    "df.compute()\ndistributed.scheduler.KilledWorker: Attempted to run task ('read-parquet-7', 3)"
    " on 4 different workers, but all those workers died while running it.\n",
    "ERROR TaskSetManager: Lost task 3.0 in stage 2.0: ExecutorLostFailure (executor 7 exited "
    "caused by one of the running tasks) Reason: Container killed by YARN for exceeding memory "
    "limits. 11.2 GB of 11 GB physical memory used.\n",
    "ERROR TaskSchedulerImpl: Lost executor 4 on 10.1.2.3: The executor with id 4 exited with exit "
    "code 137(SIGKILL, possible container OOM).\n",
])
def test_workers_lost_to_memory_in_other_frameworks(tmp_path: Path, text: str) -> None:
    assert log_alone(tmp_path, PROGRESS + text) == "host_oom"


# ---- an honest unknown: where the log stops ----

def test_unknown_says_where_the_log_stops(tmp_path: Path) -> None:
    v = verdict(tmp_path, "loading model\n" + timed(12, 3, "Epoch 0 step 0"), exit_code=None)
    assert v.cls == "unknown"
    assert "stops at 12:03" in v.detail and "Epoch 0 step 0" in v.detail and "line 2" in v.detail
