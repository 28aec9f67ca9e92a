"""The family of classify/rules/30-kills-and-hangs.yaml: what a kill or a silence left in the log.
The shell's "Killed" in the locale's words (a real bash), drawn over a progress line; a stuck
NCCL watchdog, a py-spy dump and faulthandler's timeout (really run) are a hang; a log that
stops after NCCL's init, or whose timestamps stop long before the end or kill line, hung, while
a COMPLETED exit-0 job that was only quiet is a success; frameworks' workers lost to memory;
where the log stops when the class is unknown."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from classifylib import LOSSES, NCCL_INIT, TRAINING, log_alone, timed_steps, verdict, write

from gpualert_slurm.classify import (
    JobFacts,
    TaskInput,
    classify,
)


def timed(hh: int, mm: int, text: str) -> str:
    return f"[2026-05-01 {hh:02d}:{mm:02d}:00,120] [INFO] {text}\n"


def test_a_stuck_nccl_watchdog_is_a_hang(tmp_path: Path) -> None:
    stuck = ("[rank1]:[E501 10:11:12.000000000 ProcessGroupNCCL.cpp:1495] [PG ID 0 PG GUID 0 "
             "Rank 1] Heartbeat monitor timed out! Process will be terminated after dumping "
             "debug info. workMetaList_.size()=1\n"
             "[rank1]:[F501 10:11:12.000000000 ProcessGroupNCCL.cpp:1500] [PG ID 0 PG GUID 0 "
             "Rank 1] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making "
             "progress in monitoring enqueued collectives. This typically indicates a NCCL/CUDA "
             "API (e.g., CudaEventDestroy) hang blocking the watchdog\n")
    assert log_alone(tmp_path, TRAINING + stuck) == "hang"
    # the collective timeout the watchdog caught first decides
    first = ("[rank1]:[E501 10:01:12.000000000 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught "
             "collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=4, "
             "NumelOut=4, Timeout(ms)=600000) ran for 600071 milliseconds before timing out.\n")
    assert log_alone(tmp_path, TRAINING + first + stuck) == "collective_timeout"


# ---- the shell's Killed in the locale's words (was: unknown) ----

@pytest.mark.parametrize("lang", ["zh_CN", "de", "ru", "ko"])
def test_real_bash_killed_in_its_locale(tmp_path: Path, lang: str) -> None:
    if not Path(f"/usr/share/locale/{lang}/LC_MESSAGES/libc.mo").exists():
        pytest.fail(f"no glibc messages for {lang}: scripts/install.sh installs libc-l10n",
                    pytrace=False)
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


def _python_log(tmp_path: Path, code: str, *opts: str) -> tuple[str, int]:
    log = tmp_path / "run.0.log"
    with open(log, "wb") as out:
        p = subprocess.run([sys.executable, *opts, "-c", code], stdout=out,
                           stderr=subprocess.STDOUT, timeout=30)
    return str(log), p.returncode


def test_real_faulthandler_dump_asked_for_with_a_signal_is_a_hang(tmp_path: Path) -> None:
    """faulthandler.register(SIGUSR1) and a `kill -USR1` on a stuck job (the dump has no
    "Timeout (...)!" header): each thread's stack, then the job was ended (was: unknown)."""
    code = ("import faulthandler, os, signal, threading\nprint('step 0', flush=True)\n"
            "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
            "threading.Thread(target=threading.Event().wait, daemon=True).start()\n"
            "os.kill(os.getpid(), signal.SIGUSR1)\nos.kill(os.getpid(), signal.SIGTERM)\n")
    log, rc = _python_log(tmp_path, code)
    text = Path(log).read_text()
    assert rc == -15 and "Current thread 0x" in text and "Fatal Python error" not in text
    v = classify([TaskInput(log, rank=0, step="0", signal=15)], JobFacts(exit_code=None))
    assert v.cls == "hang", v.detail
    assert classify([TaskInput(log)], JobFacts()).cls == "hang"  # the log alone


@pytest.mark.parametrize("threads", [1, 60])
def test_a_crashs_thread_dump_stays_the_crash(tmp_path: Path, threads: int) -> None:
    """python -X faulthandler prints the same thread stacks under "Fatal Python error:
    Segmentation fault": the crash, not a hang (60 threads: the dump runs far past it)."""
    code = ("import ctypes, threading\nprint('step 0', flush=True)\n"
            f"for _ in range({threads}):\n"
            "    threading.Thread(target=threading.Event().wait, daemon=True).start()\n"
            "ctypes.string_at(0)\n")
    log, rc = _python_log(tmp_path, code, "-X", "faulthandler")
    assert rc == -11 and "(most recent call first)" in Path(log).read_text()
    assert classify([TaskInput(log, rank=0, step="0", signal=11)],
                    JobFacts(exit_code=None)).cls == "segfault"
    assert classify([TaskInput(log)], JobFacts()).cls == "segfault"


def test_a_log_that_stops_after_nccl_init_hung(tmp_path: Path) -> None:
    v = verdict(tmp_path, TRAINING + NCCL_INIT, exit_code=None)
    assert v.cls == "hang" and v.decided_by == "silent_end" and "stops" in v.detail
    assert verdict(tmp_path, TRAINING + NCCL_INIT, exit_code=0).cls == "success"
    # more work after the init: no hang there
    assert log_alone(tmp_path, NCCL_INIT + TRAINING) == "unknown"


# NCCL_DEBUG=INFO's communicator set-up before "Init COMPLETE" (its documented lines: version,
# bootstrap and network, an NCCL_* variable echoed, affinity, the topology dump, the search)
NCCL_SETUP = [
    "NCCL INFO NCCL version 2.21.5+cuda12.4",
    "NCCL INFO Bootstrap : Using ib0:10.4.0.7<0>",
    "NCCL INFO NET/IB : Using [0]mlx5_2:1/IB ; OOB ib0:10.4.0.7<0>",
    "NCCL INFO Using network IB",
    "NCCL INFO NCCL_IB_HCA set by environment to mlx5_2",
    "NCCL INFO ncclCommInitRank comm 0x61a0 rank 1 nranks 8 cudaDev 1 nvmlDev 1 busId 1b000 "
    "commId 0x9e1f - Init START",
    "NCCL INFO Setting affinity for GPU 1 to ffff0000",
    "NCCL INFO === System : maxBw 48.0 totalBw 48.0 ===",
    "NCCL INFO CPU/1 (1/1/2)",
    "NCCL INFO + PCI[48.0] - GPU/1B000 (1)",
    "NCCL INFO GPU/1B000 :GPU/1B000 (0/5000.000000/LOC) CPU/1 (2/48.000000/PHB)",
    "NCCL INFO Pattern 4, crossNic 0, nChannels 4, bw 40.000000/40.000000, type NVL/PIX",
    "NCCL INFO Trees [0] 2/-1/-1->1->0 [1] 2/-1/-1->1->0",
    "NCCL INFO P2P Chunksize set to 524288",
]


@pytest.mark.parametrize("stop", range(1, len(NCCL_SETUP) + 1))
def test_a_log_that_stops_inside_nccl_setup_hung(tmp_path: Path, stop: int) -> None:
    """A failed job's log (NCCL_DEBUG=INFO) that stops anywhere inside the communicator's
    set-up, before Init COMPLETE, with no error: it hung there (was: unknown past the few
    lines of the set-up's end the rule knew)."""
    head = "".join(f"a17:3310:3390 [1] {t}\n" for t in NCCL_SETUP[:stop])
    v = verdict(tmp_path, TRAINING + head, exit_code=None)
    assert v.cls == "hang" and v.decided_by == "silent_end", (NCCL_SETUP[stop - 1], v.detail)
    # NCCL's error trace or its retries at the end are no set-up line: not a hang
    for tail in ("a17:3310:3390 [1] NCCL INFO bootstrap.cc:85 -> 3\n",
                 "a17:3310:3390 [1] NCCL INFO Call to connect returned Connection timed out, "
                 "retrying\n"):
        assert log_alone(tmp_path, TRAINING + head + tail) != "hang", tail
    # the set-up went through and training went on: no hang there
    assert log_alone(tmp_path, head + TRAINING) == "unknown"


def test_nccl_init_then_the_end_line_is_a_hang(tmp_path: Path) -> None:
    end = ("W0501 20:00:00.000000 77 torch/distributed/elastic/agent/server/api.py:719] Received "
           "15 death signal, shutting down workers\n")
    v = verdict(tmp_path, TRAINING + NCCL_INIT + end, exit_code=None)
    assert v.cls == "hang" and "collective" in v.detail, v.detail
    # an error between: that error decides, not a hang
    err = ("n3:4242:4250 [1] NCCL WARN Call to ibv_modify_qp failed with error Connection "
           "timed out\n")
    assert log_alone(tmp_path, TRAINING + NCCL_INIT + err + end) != "hang"
    # work between: the end line's class
    assert log_alone(tmp_path, NCCL_INIT + TRAINING + end) != "hang"


def test_timestamps_that_stop_long_before_the_end_line_are_a_hang(tmp_path: Path) -> None:
    lines = "".join(timed(9, m, f"step {m * 10} loss 1.{m:02d}") for m in range(0, 30, 2))
    # a launcher's timed stop line 4 h after the last step: the log's stamps show the hang
    stop = ("[2026-05-01 13:30:00,001] torch.distributed.elastic.agent.server.api: [WARNING] "
            "Received 15 death signal, shutting down workers\n")
    v = verdict(tmp_path, lines + stop, exit_code=None)
    assert v.cls == "hang" and "timestamps" in v.detail, v.detail
    # Slurm's own time-limit line outranks that inference (was: hang)
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


# ---- a monitor's ticks that hide the silence ------------------------------------------------

def tick(hh: int, mm: int, ss: int) -> str:
    """A job script's background status loop (`while sleep 1800; do echo "[$(date ...)] ..."`):
    two lines a tick, one with the job's elapsed time."""
    return (f"[2026-05-01 {hh:02d}:{mm:02d}:{ss:02d}] watch: job 4411 state RUNNING on "
            f"gn[07-08], elapsed {hh - 2}:{mm:02d}:{ss:02d}\n"
            f"[2026-05-01 {hh:02d}:{mm:02d}:{ss:02d}] watch: gpu util 100% mem 71% on 8 GPUs\n")


def test_hours_of_a_monitors_ticks_after_the_last_output_are_a_hang(tmp_path: Path) -> None:
    """A failed job whose program went quiet while a status loop in the same log went on
    ticking for hours: the heartbeat hid the silence; the log's own times show it (was:
    unknown)."""
    ticks = "".join(tick(h, m, s) for h, m, s in
                    ((3, 10, 2), (3, 40, 3), (4, 10, 5), (4, 40, 4), (5, 10, 6)))
    v = verdict(tmp_path, TRAINING + "evaluating on the validation set\n" + ticks,
                exit_code=None)
    assert v.cls == "hang" and v.decided_by == "silent_end", v.detail
    assert "2.0 h" in v.detail and "validation set" in v.detail
    # the program's lines between the ticks at the end: it was working
    mixed = tick(3, 10, 2) + TRAINING + tick(3, 40, 3) + "epoch 1 | step 400 | loss 1.2\n" \
        + tick(4, 10, 5)
    assert log_alone(tmp_path, TRAINING + mixed) != "hang"
    # half an hour of ticks is no proof
    assert log_alone(tmp_path, TRAINING + tick(3, 10, 2) + tick(3, 25, 3) + tick(3, 40, 1)) \
        == "unknown"
    # Slurm's own end line outranks the inference; a clean exit is a success
    end = ("slurmstepd: error: *** JOB 4411 ON gn07 CANCELLED AT 2026-05-01T05:11:00 DUE TO "
           "TIME LIMIT ***\n")
    assert log_alone(tmp_path, TRAINING + ticks + end) == "time_limit"
    assert verdict(tmp_path, TRAINING + ticks, exit_code=0).cls == "success"


def test_a_programs_own_timed_progress_is_no_monitor(tmp_path: Path) -> None:
    """Timed lines of one shape that come when the work allows (a converter's per-file lines,
    hours apart but not on a clock) or that count training steps are the program's own
    output: a log that stops after them is an honest unknown."""
    shards = "".join(f"[2026-05-01 {h:02d}:{m:02d}:00] convert: wrote shard {i} of 64\n"
                     for i, (h, m) in enumerate(((1, 0), (1, 7), (2, 31), (2, 44), (4, 2))))
    assert log_alone(tmp_path, "reading index\n" + shards) == "unknown"
    epochs = "".join(timed(h, 0, f"Epoch {h * 10}, loss 0.{h}") for h in range(1, 6))
    assert log_alone(tmp_path, "loading data\n" + epochs) == "unknown"


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
    assert log_alone(tmp_path, TRAINING + text) == "host_oom"


# ---- an honest unknown: where the log stops ----

def test_unknown_says_where_the_log_stops(tmp_path: Path) -> None:
    v = verdict(tmp_path, "loading model\n" + timed(12, 3, "Epoch 0 step 0"), exit_code=None)
    assert v.cls == "unknown"
    assert "stops at 12:03" in v.detail and "Epoch 0 step 0" in v.detail and "line 2" in v.detail


# ---- decision order ---------------------------------------------------------------------------

def test_completed_exit_0_silent_longer_than_the_threshold_is_success(tmp_path):
    path = write(tmp_path, "0.0.log", LOSSES + "final eval done\n")
    v = classify([TaskInput(path, exit_code=0)],
                 JobFacts(exit_code=0, slurm_state="COMPLETED", hang_threshold_s=60,
                          silence_s=3600))
    assert v.cls == "success"
    v = classify([TaskInput(path, exit_code=None, signal=15)],
                 JobFacts(exit_code=None, slurm_state="TIMEOUT", hang_threshold_s=60,
                          silence_s=3600))
    assert v.cls == "hang"


# ---- hangs the log cannot prove: unknown, with the last line and its time (held before) ----

def test_a_log_that_just_stops_is_unknown_with_its_last_line_and_time(tmp_path: Path) -> None:
    v = verdict(tmp_path, timed_steps(3, 12), exit_code=None)
    assert v.cls == "unknown"
    assert "03:11:07" in v.detail and "step 220" in v.detail
