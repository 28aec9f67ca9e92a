"""Kernel lines about another job are no evidence for this one (issue 32, section 3): on a node
several jobs share, an OOM kill names the memory cgroup it happened in, which Slurm names after
the job (v1, v2, 26.05's SLUID); that event's lines are left out of this job's evidence and
counted. The v1 lines are the shape this machine's kernel printed for a real cgroup OOM kill
on the test cluster (job 109 on n1, `--mem=64M`); the v2 and SLUID paths are Slurm's
documented layouts with the same kernel record."""

from __future__ import annotations

import pytest

from gpualert_slurm.core.evidence import bind_to_job

T = "2026-12-06T04:46:35,4296{:02d}+00:00 "


def _event(job: str, pid: int, memcg: str, n: int = 0) -> list[str]:
    return [
        T.format(n) + "python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, "
        "oom_score_adj=0",
        T.format(n + 1) + "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,"
        f"mems_allowed=0,oom_memcg={memcg.format(job=job)},task_memcg="
        f"{memcg.format(job=job)}/step_batch/task_0,task=python3,pid={pid},uid=1001",
        T.format(n + 2) + f"Memory cgroup out of memory: Killed process {pid} (python3) "
        "total-vm:423556kB, anon-rss:64768kB, file-rss:5404kB, shmem-rss:0kB, UID:1001",
    ]


LAYOUTS = {"v1": "/slurm_n1/uid_1001/job_{job}",
           "v2": "/system.slice/slurmstepd.scope/job_{job}",
           "sluid": "/system.slice/slurmstepd.scope/job_{job}"}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_another_jobs_oom_kill_is_left_out_and_counted(layout: str) -> None:
    other = "s3k9x0b2qz" if layout == "sluid" else "320"
    mine = "s3k9x0b2qa" if layout == "sluid" else "319"
    xid = T.format(50) + "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."
    lines = _event(other, 27517, LAYOUTS[layout]) + [xid]
    kept, dropped, jobs = bind_to_job(lines, {"319", mine})
    assert kept == [xid] and len(dropped) == 3 and jobs == {other}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_this_jobs_own_oom_kill_is_kept(layout: str) -> None:
    mine = "s3k9x0b2qa" if layout == "sluid" else "319"
    lines = _event(mine, 4242, LAYOUTS[layout])
    assert bind_to_job(lines, {"319", mine}) == (lines, [], set())


def test_two_jobs_events_on_one_node_are_told_apart() -> None:
    lines = _event("320", 500, LAYOUTS["v1"], 0) + _event("319", 600, LAYOUTS["v1"], 10)
    kept, dropped, jobs = bind_to_job(lines, {"319"})
    assert kept == lines[3:] and dropped == lines[:3] and jobs == {"320"}


def test_a_job_id_that_only_begins_alike_is_another_job() -> None:
    lines = _event("3190", 700, LAYOUTS["v1"])
    kept, _dropped, jobs = bind_to_job(lines, {"319"})
    assert kept == [] and jobs == {"3190"}


def test_lines_naming_no_job_are_kept() -> None:
    lines = [T.format(1) + "Out of memory: Killed process 99 (java) total-vm:1kB",
             T.format(2) + "NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE (double bit error)"]
    assert bind_to_job(lines, {"319"}) == (lines, [], set())


# ---------------------------------------------------------------------------------------------
# on the real cluster: two jobs of one user on n1, one OOM-killed by its cgroup, the other
# killed by a plain SIGKILL in the same seconds (the review's case: job 319 judged host_oom
# from job 320's kill)

OOM_JOB = """#!/bin/bash
#SBATCH --gpualert=notify=never
#SBATCH -w n1 --mem=64M -o slurm-%j.out
sleep 2
python3 -c "x = b'x' * (400 << 20)"
"""
KILLED_JOB = """#!/bin/bash
#SBATCH --gpualert=notify=never
#SBATCH -w n1 --mem=64M -o slurm-%j.out
echo "step 1 of 10"
sleep 6
kill -9 $$
"""


@pytest.mark.cluster
def test_a_neighbours_oom_kill_is_not_this_jobs_cause(cluster, workdir) -> None:
    import json

    import clusterlib as cl

    if not cluster.memory_enforced:
        pytest.fail(f"the test cluster enforces no memory limit ({cluster.cgroup})")
    killed = cl.submit(KILLED_JOB, workdir=workdir, name="killed.sh")
    oom = cl.submit(OOM_JOB, workdir=workdir, name="oom.sh")
    states = {j: cl.wait_final(j, 120) for j in (killed, oom)}
    assert states[oom].state == "OUT_OF_MEMORY", states[oom]
    verdicts = {}
    for j in (killed, oom):
        p = cluster.spool / str(j) / "verdict.json"
        verdicts[j] = cl.wait_until(lambda p=p: p.exists() and json.loads(p.read_text()), 90,
                                    f"job {j}'s verdict")
    assert verdicts[oom]["verdict"]["class"] == "host_oom"
    v = verdicts[killed]
    assert v["verdict"]["class"] != "host_oom", v["verdict"]
    kernel = [e for e in v["verdict"]["evidence"] if "kernel" in str(e.get("file"))]
    assert not any(f"job_{oom}" in str(e.get("text")) for e in kernel), kernel
    assert any(f"job {oom}" in n and "another job" in n for n in v.get("notes") or []), \
        v.get("notes")
