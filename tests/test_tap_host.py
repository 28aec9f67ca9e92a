"""The copier host (spank/host.c): each task's copier runs outside the step's cgroup, as two
threads of the step's host (one per node), as the job's user, in a session of its own, and
nothing of it outlives the job's output.

The tasks write the inode of their stdout pipe and their pid to files, then sleep; the test (root)
finds the processes that hold the other end of each pipe: the copier. Asserted per task:
- exactly one process other than the task holds the pipe: the copier's host;
- its freezer cgroup is not the task's (proctrack/cgroup waits for, and kills, the step's
  cgroup: a copier in it would hold the step's end on a stalled spool, tests/test_tap_stall.py);
- it runs as the job's user (real, effective, saved), in a session other than the task's;
- slurmstepd has no child of the job's user but the task and that host (no copier process
  per task);
and after the job: no process holds any of the pipes any more.
"""

from __future__ import annotations

import os
import pwd
import re
from pathlib import Path

import pytest
from clusterlib import ClusterFacts, make_workdir, sbatch, wait_final, wait_until, write_user_file
from spank_jobs import require_plugin

pytestmark = pytest.mark.cluster

SCRIPT = """#!/bin/bash
srun -n3 -N3 bash -c 'echo "$(readlink /proc/$$/fd/1) $$" > "task-$SLURM_PROCID"; \
until [ -e release ]; do sleep 0.1; done; echo done $SLURM_PROCID'
echo batch done
"""


@pytest.fixture(scope="module")
def c(cluster: ClusterFacts) -> ClusterFacts:
    return require_plugin(cluster)


# Slurm 26.05 names the job's cgroup by its SLUID ("s" and 13 Crockford base-32 digits) unless
# CgroupJobIdPaths=yes; earlier releases job_<id> (spank/cgroup.c, is_job_dir)
SLUID = re.compile(r"s[0-9A-HJKMNP-TV-Z]{13}")


def _job_dir(cgroup: str, job: int, task: int) -> bool:
    """CGROUP is in the job's directory, then a step's: job_<id>, or the job's SLUID (the one
    the task's environment names, where it names one)."""
    m = re.search(r"/([^/]+)/step_[^/]+(?:/|$)", cgroup)
    if not m:
        return False
    env = Path(f"/proc/{task}/environ").read_bytes().split(b"\0")
    sluid = next((e.split(b"=", 1)[1].decode() for e in env
                  if e.startswith(b"SLURM_JOB_SLUID=")), None)
    if sluid:
        return m.group(1) in (f"job_{job}", sluid)
    return m.group(1) == f"job_{job}" or bool(SLUID.fullmatch(m.group(1)))

def holders(pipe: str) -> list[int]:
    """Pids with an fd on the pipe (`pipe:[N]`)."""
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) == pipe for fd in (p / "fd").iterdir()):
                found.append(int(p.name))
        except OSError:
            continue  # gone meanwhile
    return found


UNIFIED_ONLY = Path("/sys/fs/cgroup/cgroup.controllers").exists()   # cgroup v2 (the v2 guest)


def freezer(pid: int) -> str:
    """The cgroup Slurm's proctrack/cgroup tracks: the freezer's under v1 (and hybrid), the
    unified one under v2."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        hid, controllers, path = line.split(":", 2)
        if "freezer" in controllers.split(",") or (UNIFIED_ONLY and hid == "0"):
            return path
    return ""


def status_ids(pid: int, key: str) -> list[int]:
    m = re.search(rf"^{key}:\s+(.*)$", Path(f"/proc/{pid}/status").read_text(), re.M)
    assert m, f"no {key} in /proc/{pid}/status"
    return [int(x) for x in m.group(1).split()]


def stat_fields(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def test_copiers_run_outside_the_step_cgroup_and_nothing_outlives_the_job(c: ClusterFacts) -> None:
    d = make_workdir(c, "taphost")
    job = sbatch(write_user_file(d / "job.sh", SCRIPT), "-N3", "-n3", "--gpualert", user=c.user)
    uid = pwd.getpwnam(c.user).pw_uid
    pipes = []
    try:
        files = [d / f"task-{r}" for r in range(3)]
        wait_until(lambda: all(f.is_file() and f.read_text().endswith("\n") for f in files),
                   120, "the three tasks to start")
        for f in files:
            pipe, task_s = f.read_text().split()
            task = int(task_s)
            pipes.append(pipe)
            assert pipe.startswith("pipe:["), f"{f.name}: stdout is {pipe}, not the tap's pipe"
            # The task's children (its `sleep`) hold it too; besides them, only the copier.
            others = _others(pipe, task, uid)
            assert len(others) == 1, f"{f.name}: {pipe} is held by {others} besides the task"
            copier = others[0]
            assert freezer(copier) != freezer(task), (
                f"{f.name}: the copier {copier} is in the task's cgroup {freezer(task)}")
            assert _job_dir(freezer(task), job, task), freezer(task)
            if UNIFIED_ONLY:  # v2: gpualert's own cgroup beside Slurm's scope (spank/host.c)
                assert freezer(copier).endswith("/gpualert_copiers"), freezer(copier)
            assert status_ids(copier, "Uid")[:3] == [uid] * 3
            assert stat_fields(copier)[3] != stat_fields(task)[3], "copier in the task's session"
            stepd = int(stat_fields(task)[1])
            user_children = {int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
                             and _child_of(int(p.name), stepd, uid)}
            assert user_children == {task, copier}, (
                f"slurmstepd {stepd} has children of uid {uid} besides the task {task} and "
                f"the copier host {copier}: {user_children}")
        write_user_file(d / "release", "", 0o644)
        st = wait_final(job, 120, c.root)
    finally:
        write_user_file(d / "release", "", 0o644)
    assert (st.state, str(st.exit_code)) == ("COMPLETED", "0:0"), st
    out = (d / f"slurm-{job}.out").read_text()
    assert sorted(line for line in out.splitlines() if line.startswith("done")) == \
        ["done 0", "done 1", "done 2"], out
    for pipe in pipes:
        wait_until(lambda pipe=pipe: not holders(pipe), 30, f"every holder of {pipe} to end")


def _others(pipe: str, task: int, uid: int) -> list[int]:
    """Holders of the pipe other than the task and its children. A pid that is gone by the time
    its parent is read was one of the task's `sleep 0.1` (it exits ten times a second): not a
    holder (counting it made this test fail once in CI, "held by [copier, <sleep>]")."""
    out = []
    for p in holders(pipe):
        if p == task:
            continue
        try:
            parent, owner = int(stat_fields(p)[1]), status_ids(p, "Uid")[0]
        except OSError:
            continue  # gone meanwhile
        if not (parent == task and owner == uid):
            out.append(p)
    return out


def _child_of(pid: int, parent: int, uid: int) -> bool:
    try:
        return int(stat_fields(pid)[1]) == parent and status_ids(pid, "Uid")[0] == uid
    except (OSError, AssertionError):
        return False
