"""The Prolog hook under the real Slurm cluster: the job's spool dir is there, complete, before
the job's first line runs, on every node of a multi-node job; an opted-out job gets nothing;
the Prolog -> tap path as a real job takes it; a requeued job's attempts kept apart; a job
whose Prolog comes late (a burst) keeps its logs in the dir the plugin made.
Uses the installed package (/opt/gpualert/venv) and plugin, as Slurm does."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from clusterlib import (
    ClusterFacts,
    cancel_quietly,
    submit,
    wait_final,
    wait_state,
    wait_until,
)
from test_prolog import assert_nvml_as_expected

from gpualert_slurm.core import slurm
from gpualert_slurm.core.config import load_config

pytestmark = pytest.mark.cluster

SCRIPT = """#!/bin/bash
d={spool}/$SLURM_JOB_ID
# The pre-launch guarantee, seen from inside the job: the record is there before we run.
if [ -f "$d/job.json" ] && [ -d "$d/tasks" ]; then echo prelaunch=yes; else echo prelaunch=no; fi
srun -N2 -n2 true
"""


def test_prolog_prepares_the_job_dir_on_every_node(cluster: ClusterFacts, workdir: Path) -> None:
    job = submit(SCRIPT.format(spool=cluster.spool), "-N2",
                 "--gpualert=mail=me@lab.org,hang=30m,budget=1G", "-o", "out-%j.txt",
                 workdir=workdir)
    st = wait_final(job, timeout=90)
    assert (st.state, str(st.exit_code)) == ("COMPLETED", "0:0")
    assert (workdir / f"out-{job}.txt").read_text().splitlines()[0] == "prelaunch=yes"
    d = cluster.spool / str(job)
    s = d.lstat()
    assert stat.S_ISDIR(s.st_mode) and stat.S_IMODE(s.st_mode) == 0o700
    rec = json.loads((d / "job.json").read_text())
    assert rec["user"] == cluster.user and rec["job_id"] == str(job)
    assert sorted(rec["nodes"]) == sorted(st.nodes)
    assert rec["options"]["mail"] == ["me@lab.org"] and rec["options"]["hang_s"] == 1800
    # budget=1G is cut to the site's bound (limits.budget_max, else its budget): what a user
    # writes never widens what root reads for them (docs/SECURITY.md)
    site = load_config(str(cluster.gpualert_config))
    cap = site.limits.budget_max_bytes or site.budget_bytes
    assert rec["options"]["budget_bytes"] == min(1024**3, cap)
    for node in st.nodes:
        node_rec = json.loads((d / "nodes" / f"{node}.prolog.json").read_text())
        assert node_rec["node"] == node
        assert node_rec["slurm_env"]["SLURM_SCRIPT_CONTEXT"] == "prolog_slurmd"
        assert_nvml_as_expected(node_rec["nvml"])


def test_opted_out_job_gets_no_dir(cluster: ClusterFacts, workdir: Path) -> None:
    job = submit("#!/bin/bash\necho hi\n", "--gpualert=off", "-o", "out-%j.txt",
                 workdir=workdir)
    st = wait_final(job, timeout=60)
    assert st.state == "COMPLETED"
    assert not (cluster.spool / str(job)).exists()


def _owned(path: Path, uid: int, mode: int) -> None:
    st = path.lstat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (uid, mode), \
        f"{path}: uid {st.st_uid} mode {stat.S_IMODE(st.st_mode):04o}, want {uid} {mode:04o}"


def _lines(path: Path) -> set[str]:
    return set(path.read_text().splitlines())


PROLOG_TAP = """#!/bin/bash
echo batch-out
echo batch-err >&2
srun -N2 -n2 bash -c 'echo "rank $SLURM_PROCID out"; echo "rank $SLURM_PROCID err" >&2
exit $SLURM_PROCID'
exit 3
"""


def test_prolog_then_tap_as_a_real_job_takes_it(cluster: ClusterFacts, workdir: Path) -> None:
    # Nothing made by the test: the Prolog makes the job dir, the plugin's tap fills tasks/.
    import pwd

    uid = pwd.getpwnam(cluster.user).pw_uid
    job = submit(PROLOG_TAP, "-N2", "--gpualert", "-o", "out-%j.txt", workdir=workdir)
    st = wait_final(job, timeout=90)
    assert (st.state, str(st.exit_code)) == ("FAILED", "3:0")
    d = cluster.spool / str(job)
    hooks_log = (cluster.spool / "gpualert-hooks.log").read_text()
    assert f"prolog: job {job}: created {d} " in hooks_log
    _owned(d, uid, 0o700)
    _owned(d / "job.json", 0, 0o644)
    _owned(d / "tasks", uid, 0o700)
    _owned(d / "nodes", uid, 0o700)
    assert sorted(p.name for p in (d / "nodes").glob("*.prolog.json")) == sorted(
        f"{n}.prolog.json" for n in st.nodes)
    for n in st.nodes:
        _owned(d / "nodes" / f"{n}.prolog.json", 0, 0o644)
    tasks = d / "tasks"
    names = {p.name for p in tasks.iterdir()}
    assert {"batch.0.log", "batch.0.exit", "0.0.log", "0.0.exit", "0.1.log",
            "0.1.exit"} <= names, names
    for name in ("batch.0.log", "batch.0.exit", "0.0.log", "0.0.exit", "0.1.log", "0.1.exit"):
        _owned(tasks / name, uid, 0o600)
    assert {"batch-out", "batch-err"} <= _lines(tasks / "batch.0.log")
    for rank in (0, 1):
        assert _lines(tasks / f"0.{rank}.log") == {f"rank {rank} out", f"rank {rank} err"}
    exits = {name: json.loads((tasks / name).read_text())
             for name in ("batch.0.exit", "0.0.exit", "0.1.exit")}
    assert [exits[n]["exit_code"] for n in ("batch.0.exit", "0.0.exit", "0.1.exit")] == [3, 0, 1]
    assert {exits["0.0.exit"]["node"], exits["0.1.exit"]["node"]} == set(st.nodes)
    assert exits["batch.0.exit"]["step"] == "batch" and exits["0.1.exit"]["rank"] == 1
    # Slurm's own output has every line too.
    out = _lines(workdir / f"out-{job}.txt")
    assert {"batch-out", "batch-err", "rank 0 out", "rank 1 err"} <= out


REQUEUE = r"""#!/bin/bash
n=${SLURM_RESTART_COUNT:-0}
echo "attempt=$n"
srun -n2 bash -c 'echo "rank $SLURM_PROCID restart=${SLURM_RESTART_COUNT:-unset}"
if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then python3 -c "raise RuntimeError(\"attempt zero\")"; fi'
if [ "$n" = 0 ]; then sleep 300; fi
echo "attempt $n done"
"""


def _restart_elsewhere(job: int, exclude: str) -> int:
    """Start a requeued job again at once, on another node; return Slurm's restart count.

    Seen on 22.05.8: `scontrol requeue` sets EligibleTime = now + 121 s (the credential's
    lifetime + 1). `scontrol update jobid=J StartTime=now` lowers it, but only once the job is
    PENDING (an update while it is still COMPLETING is overwritten when it turns PENDING).
    And a node that ran the previous attempt less than ~120 s ago still caches the job's
    credential: its slurmd logs "reissued job credential for job J" and does NOT run the
    Prolog again. Hence ExcNodeList: the new attempt's node runs its Prolog as usual."""
    def started() -> bool:
        state = slurm.show_job(job).state
        if state == "PENDING":
            slurm.update_job(job, ExcNodeList=exclude, StartTime="now")
        return state not in ("PENDING", "COMPLETING", "REQUEUED")

    wait_until(started, 60, f"requeued job {job} to start again", interval=1.0)
    return slurm.show_job(job).restarts  # sacct's table does not carry it


def test_requeued_job_keeps_attempts_apart(cluster: ClusterFacts, workdir: Path) -> None:
    import pwd

    uid = pwd.getpwnam(cluster.user).pw_uid
    job = submit(REQUEUE, "-N1", "-n2", "--requeue", "--gpualert", "-o", "out-%j.txt",
                 workdir=workdir)
    d = cluster.spool / str(job)
    try:
        (first,) = wait_state(job, "RUNNING", timeout=60).nodes
        # Attempt 0's ranks raised and ended: their exit records are there.
        wait_until(lambda: (d / "tasks" / "0.0.exit").exists()
                   and (d / "tasks" / "0.1.exit").exists(), 60, "attempt 0's exit records")
        slurm.requeue(job)
        restarts = _restart_elsewhere(job, first)
        st = wait_final(job, timeout=120)
    finally:
        cancel_quietly(job)
    assert (st.state, str(st.exit_code), restarts) == ("COMPLETED", "0:0", 1)
    (second,) = st.nodes
    assert second != first
    att = d / "attempt-1"
    # The Prolog of attempt 1: its own directory, owned by the user, with its node record.
    for sub in (att, att / "nodes", att / "tasks"):
        _owned(sub, uid, 0o700)
    assert [p.name for p in (att / "nodes").glob("*.prolog.json")] == [f"{second}.prolog.json"]
    rec = json.loads((att / "nodes" / f"{second}.prolog.json").read_text())
    assert rec["restart_count"] == 1 and rec["slurm_env"]["SLURM_JOB_RESTART_COUNT"] == "1"
    # Attempt 0's record stays where it was.
    assert [p.name for p in (d / "nodes").glob("*.prolog.json")] == [f"{first}.prolog.json"]
    assert json.loads((d / "nodes" / f"{first}.prolog.json").read_text())["restart_count"] == 0
    job_rec = json.loads((d / "job.json").read_text())
    assert job_rec["restart_count"] == 1 and job_rec["nodes"] == [second]
    assert [(a["attempt"], a["nodes"]) for a in job_rec["attempts"]] == [(0, [first]),
                                                                         (1, [second])]
    # What each attempt's tasks see (for the plugin): the batch script and srun's tasks get
    # SLURM_RESTART_COUNT; the Prolog gets SLURM_JOB_RESTART_COUNT.
    out = (workdir / f"out-{job}.txt").read_text()
    assert "attempt=1" in out and "rank 0 restart=1" in out and "rank 1 restart=1" in out
    # The tap (plugin): attempt 0's logs hold attempt 0 only; attempt 1's are in attempt-1/.
    root_batch = (d / "tasks" / "batch.0.log").read_text()
    assert "attempt=0" in root_batch and "attempt=1" not in root_batch
    assert "RuntimeError: attempt zero" in (d / "tasks" / "0.0.log").read_text()
    tasks1 = att / "tasks"
    batch1 = (tasks1 / "batch.0.log").read_text()
    assert "attempt=1" in batch1 and "attempt 1 done" in batch1 and "attempt=0" not in batch1
    for rank in (0, 1):
        log = (tasks1 / f"0.{rank}.log").read_text()
        assert log == f"rank {rank} restart=1\n", log
        assert json.loads((tasks1 / f"0.{rank}.exit").read_text())["exit_code"] == 0
    assert json.loads((tasks1 / "batch.0.exit").read_text())["exit_code"] == 0


LATE = """#!/bin/bash
#SBATCH --gpualert=mail=gpatest@localhost
echo "batch starts on $SLURMD_NODENAME"
srun -N2 -n2 python3 -c '
import os, sys
r = int(os.environ["SLURM_PROCID"])
print(f"rank {r} loading shard", flush=True)
if r == 1:
    raise ValueError("shard 1 has 0 samples")
sys.exit(0)'
"""


def _cluster_name() -> str:
    conf = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                          timeout=30, check=True).stdout
    return next(ln.split("=", 1)[1].strip() for ln in conf.splitlines()
                if ln.startswith("ClusterName"))


def test_a_job_whose_prolog_comes_late_keeps_its_logs(cluster: ClusterFacts,
                                                      workdir: Path) -> None:
    """A burst's job: its Prolog still queued when its tasks start (here: the queue worker's
    lock held by the test, so no worker runs and the Prolog's shim leaves the job to it after
    its wait). The plugin's slurmstepd made the job dir before the first task, as the Prolog makes
    it, so every line is logged; the Prolog that runs later joins the dir, and the report has
    the logs and the root rank."""
    import pwd

    from clusterlib import held_lock, wait_for_mail

    uid = pwd.getpwnam(cluster.user).pw_uid
    qdir = Path("/run/gpualert") / f"epilog-queue-{_cluster_name()}"
    qdir.mkdir(parents=True, exist_ok=True)
    d = cluster.spool / str(0)
    started_worker = False
    try:
        # a queue worker still warm from an earlier test lets go of the lock once its queue is empty
        with held_lock(qdir / "drainer.lock", timeout=120, holder=" (a queue worker)"):
            job = submit(LATE, "-N2", "-o", "out-%j.txt", workdir=workdir)
            d = cluster.spool / str(job)
            st = wait_final(job, timeout=120)
            assert (st.state, str(st.exit_code)) == ("FAILED", "1:0")
            # no Prolog has run: no job.json, yet the dir and every log are there
            assert not (d / "job.json").exists()
            _owned(d, uid, 0o700)
            _owned(d / "tasks", uid, 0o700)
            _owned(d / "nodes", uid, 0o700)
            tasks = d / "tasks"
            batch_log = (tasks / "batch.0.log").read_text()
            assert any(f"batch starts on {n}" in batch_log for n in st.nodes), batch_log
            assert "ValueError: shard 1 has 0 samples" in (tasks / "0.1.log").read_text()
            assert "rank 0 loading shard" in (tasks / "0.0.log").read_text()
            for name in ("batch.0.exit", "0.0.exit", "0.1.exit"):
                _owned(tasks / name, uid, 0o600)
            assert not list(cluster.spool.glob(f".tmp-{job}-*"))
            assert list(qdir.glob(f"{job}.*.prolog")), "the Prolog should still be queued"
        # The lock let go: a queue worker, started as a shim starts it, takes the queue.
        subprocess.run(["setsid", "-f", "/opt/gpualert/venv/bin/gpualert", "hook", "queue"],
                       env=dict(os.environ, GPUALERT_QUEUE_DIR=str(qdir),
                                GPUALERT_CONFIG=str(cluster.gpualert_config),
                                SLURM_CONF=str(cluster.conf)),
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True, timeout=30)
        started_worker = True
        wait_until(lambda: (d / "job.json").exists(), 60, f"{d}/job.json from the late Prolog")
        rec = json.loads((d / "job.json").read_text())
        assert rec["job_id"] == str(job) and rec["uid"] == uid
        _owned(d / "job.json", 0, 0o644)
        hooks_log = (cluster.spool / "gpualert-hooks.log").read_text()
        assert f"prolog: job {job}: joined {d} " in hooks_log
        v = wait_until(lambda: _verdict_with_report(d), 90, f"{d}/verdict.json")
        assert v["verdict"]["class"] == "python_exception", v["verdict"]
        assert v["verdict"]["root_rank"] == 1, v["verdict"]
        mail = wait_for_mail(cluster.maildir, f"X-Gpualert-Job: {job}", timeout=60)
        assert "shard 1 has 0 samples" in mail.read_text(errors="replace").replace("=\n", "")
    finally:
        if not started_worker:  # never leave the cluster's queue without a queue worker
            subprocess.run(["setsid", "-f", "/opt/gpualert/venv/bin/gpualert", "hook", "queue"],
                           env=dict(os.environ, GPUALERT_QUEUE_DIR=str(qdir),
                                    GPUALERT_CONFIG=str(cluster.gpualert_config),
                                    SLURM_CONF=str(cluster.conf)),
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=30)


def _verdict_with_report(d: Path) -> dict | None:
    p = d / "verdict.json"
    if not p.exists():
        return None
    v = json.loads(p.read_text())
    return v if "report" in v else None
