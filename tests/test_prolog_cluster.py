"""The Prolog hook under the real Slurm cluster: the job's spool dir is there, complete, before
the job's first line runs, on every node of a multi-node job; an opted-out job gets nothing.
Uses the installed package (/opt/gpualert/venv), as Slurm does."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from clusterlib import ClusterFacts, submit, wait_final

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
    assert rec["options"]["budget_bytes"] == 1024**3
    for node in st.nodes:
        node_rec = json.loads((d / "nodes" / f"{node}.prolog.json").read_text())
        assert node_rec["node"] == node
        assert node_rec["slurm_env"]["SLURM_SCRIPT_CONTEXT"] == "prolog_slurmd"
        assert node_rec["nvml"] if isinstance(node_rec["nvml"], dict) else \
            node_rec["nvml"].startswith("unavailable: ")


def test_opted_out_job_gets_no_dir(cluster: ClusterFacts, workdir: Path) -> None:
    job = submit("#!/bin/bash\necho hi\n", "--gpualert=off", "-o", "out-%j.txt",
                 workdir=workdir)
    st = wait_final(job, timeout=60)
    assert st.state == "COMPLETED"
    assert not (cluster.spool / str(job)).exists()
