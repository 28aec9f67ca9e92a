"""Slurm's own memory kill (OverMemoryKill) is written by slurmstepd into the job's StdOut file,
not through the task's output the tap logs: the job epilog saw only FAILED 0:9 and said
'killed' (issue 32, section 3). It now reads that file's tail as the job's user and gives
slurmstepd's lines to the classifier, as the job's own evidence. Real jobs on a native cluster
configured with JobAcctGatherParams=OverMemoryKill and no cgroup memory limit
(clusterlib.OVERMEM_CLUSTER_ENV), as the unprivileged test user."""

from __future__ import annotations

import json
from collections.abc import Iterator

import clusterlib as cl
import pytest
from spank_jobs import require_plugin

from gpualert_slurm.hooks.job_epilog.facts import _STEPD_LINE, output_path

JOB = """#!/bin/bash
#SBATCH --gpualert=notify=never
#SBATCH --mem=100M
#SBATCH -o {out}
echo "loading the data set"
python3 -c "import time; x = b'x' * (400 << 20); time.sleep(60)"
echo "not reached"
"""


@pytest.fixture(scope="module")
def overmem() -> Iterator[cl.ClusterFacts]:
    try:
        facts = cl.cluster_up(env=cl.OVERMEM_CLUSTER_ENV)
    except cl.ClusterError as e:
        pytest.fail(f"the OverMemoryKill test cluster is not available:\n{e}", pytrace=False)
    try:
        with cl.using_conf(facts):
            yield require_plugin(facts)
    finally:  # its daemons go: the machine's other clusters need the cores
        cl.cluster_cmd("down", env=cl.OVERMEM_CLUSTER_ENV)


@pytest.mark.cluster
@pytest.mark.parametrize("out", ["slurm-%j.out", "mem-%x-%u-%4j.log"])
def test_slurms_memory_kill_is_host_oom_with_slurms_line(overmem: cl.ClusterFacts,
                                                         out: str) -> None:
    d = cl.make_workdir(overmem, "overmem")
    job = cl.submit(JOB.format(out=out), workdir=d, name="bigload.sh")
    st = cl.wait_final(job, 120, root=overmem.root)
    assert (st.state, st.exit_code.code, st.exit_code.signal) == ("FAILED", 0, 9)
    vpath = overmem.spool / str(job) / "verdict.json"
    v = cl.wait_until(lambda: vpath.exists() and json.loads(vpath.read_text()), 90,
                      "the verdict")
    assert v["verdict"]["class"] == "host_oom", v["verdict"]
    stdout = d / out.replace("%j", str(job)).replace("%x", "bigload.sh").replace(
        "%u", overmem.user).replace("%4j", f"{job:04d}")
    ev = [e for e in v["verdict"]["evidence"] if e.get("file") == str(stdout)]
    assert ev and "exceeded memory limit" in ev[0]["text"].lower(), v["verdict"]["evidence"]
    # the file is the user's: what it says is the job's, never Slurm's word
    assert all(e["provenance"]["origin"] == "job" for e in ev)


@pytest.mark.parametrize("line", [
    "slurmstepd-n1: error: StepId=3.batch exceeded memory limit (430817280 > 104857600), "
    "being killed",
    "slurmstepd-n1: error: Exceeded job memory limit",
    "slurmstepd: error: Exceeded step memory limit at some point.",
    "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=109.batch. Some of your "
    "processes may have been killed by the cgroup out-of-memory handler.",
])
def test_slurmstepds_memory_lines_are_taken(line: str) -> None:
    assert _STEPD_LINE.match(line)


@pytest.mark.parametrize("line", [
    "slurmstepd-n1: error: *** JOB 1 ON n1 CANCELLED AT 2026-12-06T05:06:32 ***",
    "my program: exceeded memory limit",
])
def test_other_lines_are_not(line: str) -> None:
    assert not _STEPD_LINE.match(line)


def test_output_patterns_expand_as_slurmstepd_expands_them() -> None:
    rec = {"StdOut": "/w/o-%j-%u-%x-%N-%4j-%%-%A_%a.txt", "JobId": "12", "JobName": "t",
           "BatchHost": "n1", "ArrayJobId": "10", "ArrayTaskId": "2"}
    assert output_path(rec, "bob") == "/w/o-12-bob-t-n1-0012-%-10_2.txt"
    assert output_path({"StdOut": "/w/slurm-%j.out", "JobId": "7"}, "u") == "/w/slurm-7.out"
    assert output_path({"StdOut": "/w/%Z.out", "JobId": "7"}, "u") == ""  # unknown: not read
