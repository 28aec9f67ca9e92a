"""A requeued job keeps its attempts apart (issue 11, point 4; docs/CONTRACTS.md "Attempts").

Attempt 0 (`SLURM_RESTART_COUNT` unset or 0) logs into `<spool>/<jobid>/tasks/`, attempt N
into `<spool>/<jobid>/attempt-N/tasks/`; no log or exit record of one attempt holds anything
of another, and `gpualert classify <jobdir>` judges the last attempt.

Starting a requeued job without waiting: on Slurm 22.05 `scontrol requeue` sets the job's
EligibleTime to the requeue time + 121 s (credential expiry + 1 s, seen on the test
cluster), and `requeuehold` + `release` keeps that time (seen: it still started 124 s
later). `scontrol update jobid=<id> StartTime=now` once the job is PENDING (not while it is
still COMPLETING, when the requeue itself sets the time afterwards) makes it eligible at
once: seen starting 1 s after the requeue. `start_requeued_now()` does that.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from clusterlib import (
    ClusterFacts,
    cluster_lock,
    diagnostics,
    make_workdir,
    node_state,
    restore_node,
    start_now_after_requeue,
    wait_final,
    wait_state,
    wait_until,
    write_user_file,
)
from spank_jobs import (
    Canary,
    assert_nodes_not_drained,
    job_dir,
    require_plugin,
    spool_bytes,
    submit_held,
    task_files,
)

from gpualert_slurm.core import slurm
from gpualert_slurm.core.spool import attempt_dir, list_attempts
from gpualert_slurm.hooks.job_epilog.facts import ended_attempt

pytestmark = pytest.mark.cluster

GPUALERT = "/opt/gpualert/venv/bin/gpualert"

# Attempt 0: both ranks print and raise, the batch script notes it and waits to be requeued
# (by the test, or by a node failure). Attempt 1: both ranks succeed.
SCRIPT = r"""#!/bin/bash
#SBATCH -N2 -n2 --ntasks-per-node=1 --requeue --gpualert
a=${SLURM_RESTART_COUNT:-0}
echo "batch says attempt $a"
if [ "$a" = 0 ]; then
    srun -n2 -o "rank-%j-%t.a0" /usr/bin/python3 -c '
import os
print("rank", os.environ["SLURM_PROCID"], "attempt 0 starts", flush=True)
raise RuntimeError("attempt 0 fails on purpose")'
    echo "batch says attempt 0 step failed"
    {wait}
    exit 1
fi
srun -n2 -o "rank-%j-%t.a1" /usr/bin/python3 -c '
import os
print("rank", os.environ["SLURM_PROCID"], "attempt 1 succeeds")'
echo "batch says attempt 1 done"
"""
WAIT_FOR_REQUEUE = 'touch "failed-$SLURM_JOB_ID"; sleep 300'
# For the node failure: a step that keeps running on both nodes until a node dies.
WAIT_IN_STEP = ('srun -n2 bash -c \'touch "running-$SLURM_JOB_ID-$SLURM_PROCID"; '
                'exec sleep 300\'')


@pytest.fixture(scope="module")
def c(cluster: ClusterFacts) -> ClusterFacts:
    return require_plugin(cluster)


def start_requeued_now(job_id: int, timeout: float = 90) -> None:
    """Make a just-requeued job eligible now instead of 121 s later (see the module doc)."""
    wait_state(job_id, "PENDING", timeout)
    start_now_after_requeue(job_id)


def cancel_unless_ended(job_id: int) -> None:
    """Never leave a test's job (pending with a StartTime, or sleeping) in the shared queue."""
    with contextlib.suppress(slurm.SlurmError):
        if not slurm.job_state(job_id).final:
            slurm.cancel(job_id)


def exit_record(c: ClusterFacts, job_id: int, name: str, attempt: int) -> dict[str, object]:
    raw = spool_bytes(c, job_id, name, attempt)
    assert raw is not None, f"no {name} for attempt {attempt} of job {job_id}"
    return json.loads(raw)


def assert_attempts_apart(c: ClusterFacts, job_id: int) -> None:
    """tasks/ holds attempt 0 only, attempt-1/tasks/ attempt 1 only; classify says success."""
    jd = job_dir(c, job_id)
    assert list_attempts(str(jd)) == [0, 1], sorted(os.listdir(jd))
    assert Path(attempt_dir(str(jd), 1)) == jd / "attempt-1"
    first, second = task_files(c, job_id), {
        f.name: f.read_bytes() for f in (jd / "attempt-1" / "tasks").iterdir() if f.is_file()}
    for name in ("batch.0.log", "0.0.log", "0.1.log"):
        assert name in first, f"attempt 0 has no tasks/{name}: {sorted(first)}"
        assert name in second, f"attempt 1 has no attempt-1/tasks/{name}: {sorted(second)}"
        assert b"attempt 1" not in first[name], f"tasks/{name} holds attempt 1's output"
        assert b"attempt 0" not in second[name], f"attempt-1/tasks/{name} holds attempt 0's"
    assert b"batch says attempt 0" in first["batch.0.log"]
    assert b"batch says attempt 1 done" in second["batch.0.log"]
    for rank in (0, 1):
        assert f"rank {rank} attempt 1 succeeds".encode() in second[f"0.{rank}.log"]
        assert b"RuntimeError" not in second[f"0.{rank}.log"]
        rec = exit_record(c, job_id, f"0.{rank}.exit", 1)
        assert rec["exit_code"] == 0, rec
    rec = exit_record(c, job_id, "batch.0.exit", 1)
    assert rec["exit_code"] == 0, rec
    proc = subprocess.run([GPUALERT, "classify", "--json", str(jd)], capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    verdict = json.loads(proc.stdout)
    assert verdict["class"] == "success", verdict


def attempt_0_failed(c: ClusterFacts, name: str, wait: str = WAIT_FOR_REQUEUE
                     ) -> tuple[Path, int]:
    """SCRIPT submitted (its attempt 0 ending in `wait`), once attempt 0 has failed its step:
    (its work dir, the job). The job is cancelled if that never comes."""
    d = make_workdir(c, name)
    script = write_user_file(d / "job.sh", SCRIPT.replace("{wait}", wait))
    job = submit_held(c, script)
    try:
        wait_until(lambda: (d / f"failed-{job}").exists(), 120,
                   f"attempt 0 of job {job} to fail its step",
                   diagnose=lambda: diagnostics(job, c.root))
    except BaseException:
        cancel_unless_ended(job)
        raise
    return d, job


def test_scontrol_requeue_keeps_attempts_apart(c: ClusterFacts) -> None:
    """Attempt 0's ranks raise, `scontrol requeue`, attempt 1 succeeds: two sets of logs."""
    d, job = attempt_0_failed(c, "requeue")
    try:
        slurm.requeue(job)
        start_requeued_now(job)
        st = wait_final(job, 180, c.root)
    finally:
        cancel_unless_ended(job)
    assert (st.state, str(st.exit_code)) == ("COMPLETED", "0:0"), st  # (sacct has no Restarts)
    first = task_files(c, job)
    for rank in (0, 1):  # attempt 0's ranks: exactly what each printed to its own file
        assert first[f"0.{rank}.log"] == (d / f"rank-{job}-{rank}.a0").read_bytes()
        assert b"RuntimeError: attempt 0 fails on purpose" in first[f"0.{rank}.log"]
        assert exit_record(c, job, f"0.{rank}.exit", 0)["exit_code"] == 1
    assert_attempts_apart(c, job)
    assert_nodes_not_drained(st.nodes)


def test_node_failure_requeue_keeps_attempts_apart(c: ClusterFacts) -> None:
    """Attempt 0 runs a step on two nodes, one node's slurmd is killed, Slurm requeues the job
    (JobRequeue, --requeue), attempt 1 runs elsewhere and succeeds: two sets of logs."""
    d = make_workdir(c, "requeue-nodefail")
    script = write_user_file(d / "job.sh", SCRIPT.replace("{wait}", "true").replace(
        'echo "batch says attempt 0 step failed"',
        'echo "batch says attempt 0 step failed"\n    ' + WAIT_IN_STEP))
    # --exclusive: the node we kill runs nothing of other tests.
    job = submit_held(c, script, ["--exclusive"])
    victim = None
    try:
        wait_until(lambda: all((d / f"running-{job}-{r}").exists() for r in (0, 1)), 180,
                   f"attempt 0 of job {job} to run its long step on both nodes",
                   diagnose=lambda: diagnostics(job, c.root))
        info = slurm.show_job(job)
        batch_host = info.raw.get("BatchHost", "")
        victim = next(n for n in info.nodes if n != batch_host)
        with cluster_lock(c):  # no concurrent `cluster up` may restart the slurmd meanwhile
            try:
                os.kill(int(c.slurmd_pidfile(victim).read_text().strip()), signal.SIGKILL)
                wait_until(lambda: slurm.show_job(job).restarts >= 1, 150,
                           f"job {job} to be requeued after {victim}'s slurmd died",
                           diagnose=lambda: diagnostics(job, c.root))
            finally:
                restore_node(c, victim)
        start_requeued_now(job)
        st = wait_final(job, 240, c.root)
    finally:
        cancel_unless_ended(job)
        if victim and not node_state(victim).startswith(("idle", "mixed", "alloc")):
            restore_node(c, victim)
    assert (st.state, str(st.exit_code)) == ("COMPLETED", "0:0"), st  # (sacct has no Restarts)
    assert_attempts_apart(c, job)


def test_attempt_dir_planted_by_the_previous_attempt_harms_nothing(c: ClusterFacts) -> None:
    """Attempt 0 owns the job dir, so it can plant `attempt-1` (here a symlink to a directory
    of root's) before it is requeued. Attempt 1 must still run and end as normal, root's
    directory must gain nothing, and the node must not be drained."""
    canary = Canary.make(c.root / f"canary-attempt-{uuid.uuid4().hex[:8]}")
    made = canary.snapshot()
    plant = (f'ln -s {canary.dir} "{c.spool}/$SLURM_JOB_ID/attempt-1"; '
             f'ln -s {canary.file} "{c.spool}/$SLURM_JOB_ID/attempt-2"; ')
    d, job = attempt_0_failed(c, "requeue-planted", plant + WAIT_FOR_REQUEUE)
    try:
        assert (job_dir(c, job) / "attempt-1").is_symlink()
        slurm.requeue(job)
        start_requeued_now(job)
        st = wait_final(job, 180, c.root)
    finally:
        cancel_unless_ended(job)
    out = (d / f"slurm-{job}.out").read_bytes()
    assert (st.state, str(st.exit_code)) == ("COMPLETED", "0:0"), (st, out[-500:])
    assert b"batch says attempt 1 done" in out, out[-500:]
    assert canary.snapshot() == made, "a root-owned file or directory was changed"
    assert_nodes_not_drained(st.nodes)


def test_a_requeued_runs_job_epilog_reports_that_run(c: ClusterFacts) -> None:
    """Slurm counts the restart before it starts EpilogSlurmctld for a run it requeues, so
    run 0's job epilog reads SLURM_JOB_RESTART_COUNT=1. The epilog works out the run that
    ended from Slurm's record (facts.ended_attempt), checked here against the real record of
    a requeued job: an epilog started at the requeue reports run 0, while run 0 completes,
    while run 1 waits and after run 1 has ended; one started after run 1's end reports run 1;
    and each run's verdict is in its own attempt dir, with its own outcome."""
    _, job = attempt_0_failed(c, "requeue-epilog")
    try:
        requeued_at = time.time()
        slurm.requeue(job)
        env = {"SLURM_JOB_RESTART_COUNT": "1"}
        # run 1 not started yet (still completing run 0, then pending)
        assert ended_attempt(str(job), env, requeued_at) == 0
        wait_state(job, "PENDING", 90)
        assert ended_attempt(str(job), env, requeued_at) == 0
        start_now_after_requeue(job)
        st = wait_final(job, 180, c.root)
    finally:
        cancel_unless_ended(job)
    assert (st.state, str(st.exit_code)) == ("COMPLETED", "0:0"), st
    # run 1 has run and ended: run 0's epilog, had it come now, still reports run 0
    assert ended_attempt(str(job), env, requeued_at) == 0
    assert ended_attempt(str(job), env, time.time()) == 1  # run 1's own epilog
    assert ended_attempt(str(job), {}, time.time()) == 0
    verdicts = [job_dir(c, job) / "verdict.json", job_dir(c, job) / "attempt-1" / "verdict.json"]
    wait_until(lambda: all(v.exists() for v in verdicts), 120,
               f"both runs' verdicts of job {job}", diagnose=lambda: diagnostics(job, c.root))
    first, second = (json.loads(v.read_text()) for v in verdicts)
    assert (first["attempt"], first["failed"]) == (0, True), first["verdict"]
    assert (second["attempt"], second["failed"]) == (1, False), second["verdict"]
    assert second["verdict"]["class"] == "success", second["verdict"]
