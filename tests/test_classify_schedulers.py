"""The family of classify/rules/25-schedulers.yaml: how a scheduler ended the job, as its own lines
in the job log say: Slurm (its memory verdict over its cancel line, its time limit over an error
the job went on after), submitit's UncompletedJobError with a Slurm state, IBM Spectrum LSF's
termination reasons, clouds' and Kubernetes' preemption and node-loss wordings, Ray's lost
nodes, Open MPI losing a remote daemon. An error right before the end line is still the cause; a
warning, a sentence about what preemption would do, or DeepSpeed's shutdown after the cancel are
not. Wordings from the tools' own sources (Slurm 22.05's libslurmfull strings, LSF, Ray's GCS
death causes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from classifylib import (
    LOSSES,
    NCCL_INIT,
    PROGRESS,
    TRAINING,
    job_verdict,
    log_alone,
    orte_lost,
    task,
    timed_steps,
    verdict,
    write,
)

from gpualert_slurm.classify import (
    JobFacts,
    TaskInput,
    classify,
)

BARS = "\r".join(f"{p:3d}%|{'#' * (p // 10):10s}| {p // 2}/50 [1{p // 10}:00<2:00:00, "
                 "600.00s/it]" for p in range(0, 60, 8))

LSF_HEAD = ("\n------------------------------------------------------------\n"
            "Sender: LSF System <lsfadmin@gpu-17>\nSubject: Job 991: <train> in cluster <c1> "
            "Exited\n\nJob <train> was submitted from host <login1> by user <u1>.\n")

DS_SHUTDOWN = ("[2026-05-01 10:00:05,000] [INFO] [launch.py:315:sigkill_handler] Killing "
               "subprocess 5151\n[2026-05-01 10:00:05,100] [ERROR] [launch.py:321:sigkill_handler] "
               "['/usr/bin/python', '-u', 'train.py', '--local_rank=1'] exits with return code = "
               "-15\nsubprocess.CalledProcessError: Command '['/usr/bin/python', '-u', 'train.py', "
               "'--local_rank=1']' died with <Signals.SIGTERM: 15>.\n")

CANCEL = "slurmstepd: error: *** JOB 31 ON gpu-2 CANCELLED AT 2026-05-01T10:00:04 ***\n"

SUBMITIT_TB = ('Traceback (most recent call last):\n  File "sweep.py", line 9, in <module>\n'
               '    job.result()\n  File "/x/site-packages/submitit/core/core.py", line 266, '
               'in result\n    r = self.results()\n  File "/x/site-packages/submitit/core/'
               'core.py", line 385, in results\n    raise utils.UncompletedJobError(msg)\n'
               "submitit.core.utils.UncompletedJobError: Job 77 (task: 0) with path /l/77.pkl\n")

LIMIT = ("slurmstepd: error: *** JOB 9 ON n1 CANCELLED AT 2026-11-29T12:00:00 DUE TO TIME LIMIT"
         " ***\n")


# ---- node_failure: Open MPI lost a remote daemon ----

@pytest.mark.parametrize("block", [
    "PRTE has lost communication with a remote daemon.\n\n  HNP daemon   : "
    "[prterun-cn01-4211@0,0] on node cn01\n  Remote daemon: [prterun-cn01-4211@0,3] on node "
    "cn04\n\nThis is usually due to either a failure of the TCP network\nconnection to the "
    "node, or possibly an internal failure of\nthe daemon itself.",
    "ORTE has lost communication with a remote daemon.\n\n  HNP daemon   : [[4410,0],0] on "
    "node g01\n  Remote daemon: [[4410,0],1] on node g07\n",
    "An ORTE daemon has unexpectedly failed after launch and before\ncommunicating back to "
    "mpirun. This could be caused by a number\nof factors, including an inability to create a "
    "connection back\nto mpirun due to a lack of common network interfaces and/or no\nroute "
    "found between them.",
])
def test_mpi_daemon_lost(tmp_path: Path, block: str) -> None:
    text = PROGRESS + "-" * 74 + "\n" + block + "\n" + "-" * 74 + "\n"
    v = verdict(tmp_path, text)
    assert v.cls == "node_failure", v.to_json()


# ---- Slurm's own memory verdict outranks the kill (was: cancelled / cuda_setup) ----

@pytest.mark.parametrize("text", [
    TRAINING + "slurmstepd: error: StepId=4242.batch exceeded memory limit (913412096 > "
    "524288000), being killed\nslurmstepd: error: Exceeded job memory limit\n"
    "slurmstepd: error: *** JOB 4242 ON n2 CANCELLED AT 2026-03-04T05:06:07 ***\n" + TRAINING,
    # older releases name the job
    TRAINING + "slurmstepd: error: Job 77 exceeded memory limit (2048000 > 1024000), being "
    "killed\nslurmstepd: error: *** JOB 77 ON cn07 CANCELLED AT 2026-03-04T05:06:07 ***\n",
    # a framework's warning on a CPU node, then the cgroup's report
    "2026-03-04 05:06:07.123456: W external/xla/xla/stream_executor/cuda/cuda_driver.cc:282] "
    "failed call to cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected\n"
    + TRAINING + "/var/spool/slurmd/job00042/slurm_script: line 9: 31337 Killed    python "
    "train.py\nslurmstepd: error: Detected 1 oom-kill event(s) in StepId=42.batch. Some of your "
    "processes may have been killed by the cgroup out-of-memory handler.\n",
])
def test_slurms_memory_verdict_beats_its_cancel_line(tmp_path: Path, text: str) -> None:
    v = verdict(tmp_path, text, exit_code=None)
    assert v.cls == "host_oom", v.detail
    assert v.decided_by == "host_oom_state" and "verdict" in v.detail


def test_a_step_over_its_memory_at_some_point_that_succeeded_stays_success(
        tmp_path: Path) -> None:
    v = verdict(tmp_path, TRAINING + "slurmstepd: error: Exceeded step memory limit at some "
                "point.\n", exit_code=0)
    assert v.cls == "success"


# ---- an error the job survived, then Slurm's end (was: the earlier error's class) ----

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
    text = (TRAINING + "2026-02-01 10:11:11.000000: W external/xla/xla/stream_executor/cuda/"
            "cuda_driver.cc:282] failed call to cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable "
            "device is detected\nslurmstepd: error: *** JOB 5 ON n1 CANCELLED AT "
            "2026-02-01T10:11:12 DUE TO TIME LIMIT ***\n")
    assert log_alone(tmp_path, text) == "time_limit"


def test_an_error_right_before_the_time_limit_still_is_the_cause(tmp_path: Path) -> None:
    text = (TRAINING + "Traceback (most recent call last):\n  File \"train.py\", line 9, in "
            "<module>\n    load()\nFileNotFoundError: [Errno 2] No such file or directory: "
            "'shard-7.bin'\nslurmstepd: error: *** JOB 5 ON n1 CANCELLED AT 2026-02-01T10:11:12 "
            "DUE TO TIME LIMIT ***\n")
    assert log_alone(tmp_path, text) == "file_not_found"


# ---- LSF's job report (was: unknown, or a distractor's class) ----

@pytest.mark.parametrize(("reason", "cls"), [
    ("TERM_RUNLIMIT: job killed after reaching LSF run time limit.", "time_limit"),
    ("TERM_OWNER: job killed by owner.", "cancelled"),
    ("TERM_ADMIN: job killed by root or LSF administrator.", "cancelled"),
    ("TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.", "host_oom"),
    ("TERM_PREEMPT: job killed after preemption.", "preempted"),
])
def test_lsfs_termination_reason_decides(tmp_path: Path, reason: str, cls: str) -> None:
    text = (TRAINING + "/opt/app/x.py:3: UserWarning: FileNotFoundError: [Errno 2] No such file "
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


def test_a_sentence_about_what_preemption_would_do_is_no_preemption(tmp_path: Path) -> None:
    text = "INFO checkpointing every 500 steps so that if the node is preempted we resume\n"
    assert verdict(tmp_path, text + TRAINING, exit_code=0).cls == "success"
    assert log_alone(tmp_path, text + TRAINING) == "unknown"


@pytest.mark.parametrize("end,cls", [
    ("slurmstepd: error: *** JOB 12 ON n4 CANCELLED AT 2026-05-01T20:00:00 DUE TO TIME LIMIT "
     "***\n", "time_limit"),
    ("slurmstepd: error: *** STEP 12.0 ON n4 CANCELLED AT 2026-05-01T20:00:00 ***\n"
     "slurmstepd: error: *** JOB 12 ON n4 CANCELLED AT 2026-05-01T20:00:00 ***\n", "cancelled"),
])
def test_nccl_init_then_slurms_end_line_is_slurms_word(tmp_path: Path, end: str, cls: str
                                                       ) -> None:
    # Slurm's own end line outranks the inferred hang (was: hang)
    assert log_alone(tmp_path, TRAINING + NCCL_INIT + end) == cls


# ---- a multi-node launcher's shutdown after a peer died, then CANCELLED (was: cancelled) ----

def test_a_lost_peer_before_the_cancel_line_is_the_cause(tmp_path: Path) -> None:
    text = (TRAINING + "gpu-2:5151:5190 [1] NCCL INFO [Service thread] Connection closed by "
            "localRank 1\n[2026-05-01 10:00:03,000] [INFO] [launch.py:319:sigkill_handler] "
            "Killing subprocess 5151\nslurmstepd: error: *** JOB 31 ON gpu-2 CANCELLED AT "
            "2026-05-01T10:00:04 ***\n")
    assert log_alone(tmp_path, text) == "nccl_error"
    # the lines after Slurm's cancel are its consequence
    after = (TRAINING + "slurmstepd: error: *** JOB 31 ON gpu-2 CANCELLED AT 2026-05-01T10:00:04 "
             "***\ngpu-2:5151:5190 [1] NCCL INFO [Service thread] Connection closed by "
             "localRank 1\n")
    assert log_alone(tmp_path, after) == "cancelled"


def test_deepspeeds_shutdown_after_the_cancel_is_no_python_exception(tmp_path: Path) -> None:
    # (was: python_exception, the launcher's CalledProcessError)
    assert log_alone(tmp_path, TRAINING + CANCEL + DS_SHUTDOWN) == "cancelled"
    peer = ("gpu-2:5151:5190 [1] NCCL INFO [Service thread] Connection closed by localRank 0\n")
    assert log_alone(tmp_path, TRAINING + peer + CANCEL + DS_SHUTDOWN) == "nccl_error"
    # a rank's own error before it decides
    own = ("Traceback (most recent call last):\n  File \"train.py\", line 80, in <module>\n"
           "    loss.backward()\nRuntimeError: CUDA error: an illegal memory access was "
           "encountered\n")
    assert log_alone(tmp_path, TRAINING + own + DS_SHUTDOWN + CANCEL) == "cuda_error"


# ---- submitit: the state in UncompletedJobError's message ----

@pytest.mark.parametrize("state,cls", [("NODE_FAIL", "node_failure"), ("TIMEOUT", "time_limit"),
                                       ("PREEMPTED", "preempted"),
                                       ("OUT_OF_MEMORY", "host_oom")])
def test_submitit_state_decides(tmp_path: Path, state: str, cls: str) -> None:
    log = (SUBMITIT_TB + f"has not produced any output (state: {state})\n"
           "No output/error stream produced ! Check: /l/77_0_log.out\n")
    v = job_verdict([task(tmp_path, log)])
    assert v.cls == cls, v.to_json()


def test_submitit_failed_state_is_still_an_exception(tmp_path: Path) -> None:
    log = SUBMITIT_TB + "has not produced any output (state: FAILED)\n"
    assert job_verdict([task(tmp_path, log)]).cls == "python_exception"


def test_time_limit_line_does_not_demote_a_cause_that_came_just_before_it(tmp_path):
    path = write(tmp_path, "0.0.log", LOSSES + "Traceback (most recent call last):\n  File "
                 "\"t.py\", line 4, in <module>\nKeyError: 'input_ids'\n" + LIMIT)
    v = classify([TaskInput(path, signal=15)], JobFacts(signal=15))
    assert (v.cls, v.decided_by) == ("python_exception", "time_limit_or_cancel")
    assert v.detail.startswith("(then time limit)")
    # an exception the job survived, long before the limit: the limit decides
    path = write(tmp_path, "1.log", "KeyError: 'x' (logged and skipped)\n" + LOSSES * 10 + LIMIT)
    assert classify([TaskInput(path, signal=15)], JobFacts(signal=15)).cls == "time_limit"


def test_time_limit_after_a_labelled_rank_error_in_the_batch_log(tmp_path):
    """srun --label: rank 1's traceback is labelled, slurmstepd's time-limit line is not."""
    path = write(tmp_path, "batch.0.log", "0: step 1\n1: step 1\n1: Traceback (most recent call "
                 "last):\n1:   File \"t.py\", line 3, in <module>\n1: ValueError: bad shard\n"
                 + LIMIT)
    v = classify([TaskInput(path, rank=0, node="n1", step="batch", signal=15)],
                 JobFacts(slurm_state="TIMEOUT"))
    assert (v.cls, v.root_rank) == ("python_exception", 1)


# ---- Slurm's own end line outranks an inference (was: hang / unknown) ----

@pytest.mark.parametrize("state,exit_code,signal", [
    ("TIMEOUT", None, 15), (None, None, None)])
def test_time_limit_after_a_long_quiet_is_the_time_limit(tmp_path: Path, state, exit_code,
                                                         signal) -> None:
    # the log's own stamps: 30 minutes of steps, then nothing for 5 hours until Slurm's line
    text = (timed_steps(2, 30) + "slurmstepd: error: *** JOB 9127 ON gpu-04 CANCELLED AT "
            "2026-03-01T07:31:00 DUE TO TIME LIMIT ***\n")
    (tmp_path / "run.0.log").write_text(text)
    v = classify([TaskInput(str(tmp_path / "run.0.log"), rank=0, exit_code=exit_code,
                            signal=signal)],
                 JobFacts(exit_code=exit_code, signal=signal, slurm_state=state))
    assert v.cls == "time_limit", v.detail


def test_time_limit_right_after_a_collective_set_up_is_the_time_limit(tmp_path: Path) -> None:
    text = (TRAINING + "gpu-04:1234:1290 [0] NCCL INFO comm 0x55d0 rank 0 nranks 8 cudaDev 0 "
            "busId 1b000 - Init START\nslurmstepd: error: *** JOB 9127 ON gpu-04 CANCELLED AT "
            "2026-03-01T07:31:00 DUE TO TIME LIMIT ***\n")
    assert log_alone(tmp_path, text) == "time_limit"


@pytest.mark.parametrize("what", ["JOB 5120", "STEP 5120.0"])
def test_slurms_cancel_line_with_the_signal_is_cancelled(tmp_path: Path, what: str) -> None:
    # slurmstepd names the signal with strsignal(): "DUE to SIGNAL Terminated"
    text = TRAINING + (f"slurmstepd: error: *** {what} ON cn12 CANCELLED AT 2026-05-02T11:22:33 "
                       "DUE to SIGNAL Terminated ***\n")
    assert log_alone(tmp_path, text) == "cancelled"


# ---- Open MPI 1's lost-daemon wording (was: unknown) ----

def test_open_mpi_1_lost_daemon_wording_is_node_failure(tmp_path: Path) -> None:
    # (was: unknown) Open MPI 1.x help-errmgr-base.txt
    text = (TRAINING + "------------------------------------------------------------------\n"
            "ORTE has lost communication with its daemon located on node:\n\n"
            "  hostname:  compute-0-7\n\nThis is usually due to either a failure of the TCP "
            "network\nconnection to the node, or possibly an internal failure of\nthe daemon "
            "itself. We cannot recover from this failure, and\ntherefore will terminate the "
            "job.\n")
    assert log_alone(tmp_path, text) == "node_failure"


# ---- preemption as clouds say it (was: unknown) ----

@pytest.mark.parametrize("line", [
    "azureml.exceptions.ServiceException: PreemptionError",
    '{"DocumentIncarnation": 4, "Events": [{"EventId": "A1B2", "EventType": "Preempt", '
    '"ResourceType": "VirtualMachine", "Resources": ["trainer_0"], "EventStatus": "Scheduled"}]}',
    "WARNING: Spot instance interruption notice received; the instance stops in 2 minutes",
])
def test_cloud_preemption_wordings(tmp_path: Path, line: str) -> None:
    assert log_alone(tmp_path, TRAINING + line + "\n") == "preempted"


# ---- srun unable to reach a node (was: unknown) ----

def test_srun_unable_to_launch_on_a_node_is_node_failure(tmp_path: Path) -> None:
    # (was: unknown) srun's launch error with slurm_strerror's words
    text = ("srun: error: Task launch for StepId=8812.0 failed on node gpu-31: Communication "
            "connection failure\nsrun: error: Application launch failed: Communication "
            "connection failure\nsrun: Job step aborted: Waiting up to 32 seconds for job step "
            "to finish.\n")
    assert log_alone(tmp_path, text) == "node_failure"


# ---- Open MPI losing a daemon without its transport saying it was killed: a lost node ----
# (the kill before it: tests/test_classify_ranks_and_launchers.py)

@pytest.mark.parametrize("before,state,cls", [
    ("", None, "node_failure"),  # held before: the loss alone
    ("srun: error: Node failure on gpu-12\n", None, "node_failure"),
    # Slurm's own state outranks any log line
    ("srun: error: gpu-12: task 1: Killed\n", "NODE_FAIL", "node_failure"),
    # a kill far before the loss is not that daemon's
    ("srun: error: gpu-12: task 1: Killed\n" + TRAINING * 3, None, "node_failure"),
])
def test_a_daemon_lost_without_its_kill_is_a_node_failure(tmp_path: Path, before: str, state,
                                                           cls: str) -> None:
    (tmp_path / "run.0.log").write_text(TRAINING + before + orte_lost("gpu-12"))
    v = classify([TaskInput(str(tmp_path / "run.0.log"), rank=0, exit_code=1)],
                 JobFacts(exit_code=1, slurm_state=state))
    assert v.cls == cls, v.detail
