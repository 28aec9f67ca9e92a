"""One user must not stall every user's reports (issue 28): fifty jobs of the test user that
each replace their own nodes/ with a file (before the fix each job epilog then waited its whole
node wait, 22.5 s, in one of the controller's few slots, first in first out) end just before
another user's failing job; that job's report comes within twice its time on a quiet queue.
Real jobs on the real cluster, the hostile ones as the unprivileged test user; the other user
is root, the one other user with an account on the test cluster."""

from __future__ import annotations

import json
import re
from pathlib import Path

import clusterlib as cl
import pytest

from gpualert_slurm.core import slurm

HOSTILE = """#!/bin/bash
#SBATCH --gpualert=notify=never
#SBATCH -o /dev/null
sleep 1
rm -rf {spool}/$SLURM_JOB_ID/nodes && : > {spool}/$SLURM_JOB_ID/nodes
exit 1
"""
OTHER = """#!/bin/bash
#SBATCH --gpualert=notify=never
#SBATCH -o slurm-%j.out
sleep {sleep}
echo "ValueError: the other user's own failure"
date +%s.%N > {stamp}
exit 1
"""


def _report_latency(cluster: cl.ClusterFacts, workdir: Path, tag: str, sleep: float = 1.0
                    ) -> tuple[int, float]:
    """(job id, seconds from the job's last line to its verdict.json) of root's failing job."""
    stamp = workdir / f"end-{tag}"
    job = cl.submit(OTHER.format(sleep=sleep, stamp=stamp), workdir=workdir, user="root",
                    name=f"other-{tag}.sh")
    cl.wait_final(job, 180)
    vpath = cluster.spool / str(job) / "verdict.json"
    cl.wait_until(lambda: vpath.exists() and stamp.exists(), 180, f"job {job}'s verdict",
                  interval=0.1)
    v = json.loads(vpath.read_text())
    assert v["verdict"]["class"] == "python_exception", v["verdict"]
    assert v["trusted"]["slurm"]["user"] == "root"
    return job, vpath.stat().st_mtime - float(stamp.read_text())


def _slot_wait(cluster: cl.ClusterFacts, job: int) -> float | None:
    log = (cluster.spool / "gpualert-hooks.log").read_text(errors="replace")
    m = re.findall(rf"epilog-slurmctld: job {job}: .*waited ([0-9.]+) s for a slot", log)
    return float(m[-1]) if m else None


@pytest.mark.cluster
def test_fifty_broken_node_dirs_leave_another_users_report_in_time(
        cluster: cl.ClusterFacts) -> None:
    hostile_dir = cl.make_workdir(cluster, "queue-hostile")
    other_dir = cl.make_workdir(cluster, "queue-other", user="root")
    _, alone = _report_latency(cluster, other_dir, "alone")
    script = cl.write_user_file(hostile_dir / "hostile.sh", HOSTILE.format(spool=cluster.spool))
    hostile = [cl.sbatch(script) for _ in range(50)]
    try:
        # the other user's job ends just after the fifty: its job epilog is queued behind theirs
        job, loaded = _report_latency(cluster, other_dir, "loaded", sleep=2.0)
        finals = cl.wait_final_many(hostile, 300)
        assert all(st.state == "FAILED" for st in finals), [st.state for st in finals]
        assert all(slurm.accounting(j).state == "FAILED" for j in hostile[:3])
        print(f"report latency alone {alone:.2f} s, behind 50 broken jobs {loaded:.2f} s "
              f"(x{loaded / alone:.2f}); slot wait {_slot_wait(cluster, job)}")
        assert loaded <= 2 * max(alone, 1.0), (alone, loaded)
        # each hostile job epilog gave up its node wait at once: no verdict waited 22.5 s
        log = (cluster.spool / "gpualert-hooks.log").read_text(errors="replace")
        secs = [float(s) for j in hostile for s in re.findall(
            rf"epilog-slurmctld: job {j}: verdict .* in ([0-9.]+) s", log)]
        assert secs and max(secs) < 10.0, secs
    finally:
        cl.cancel_quietly(*hostile)
