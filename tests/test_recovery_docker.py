"""Recovery on a real node loss: a container node killed (`docker kill`: slurmd, slurmstepd
and the ranks gone at once) on the container cluster, which others' tests share. So this
runs in the cluster's own (default) monitor mode: the decision must name the lost node and say
what action mode would do (drain it, requeue the job excluding it), and nothing is done.
Action mode on a lost node is tested on the native recovery cluster (test_recovery_cluster)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import clusterlib
import pytest
from clusterlib import make_workdir, wait_state, wait_until
from dockerlib import DockerCluster, docker_cluster, docker_cluster_session  # noqa: F401
from spank_jobs import require_plugin

from gpualert_slurm import slurm

pytestmark = [pytest.mark.docker, pytest.mark.cluster]

SCRIPT = """#!/bin/bash
srun -N2 -n2 bash -c 'touch "running-$SLURM_PROCID"; exec sleep 300'
"""


def decision(audit: Path, job: int) -> dict | None:
    if not audit.exists():
        return None
    for line in audit.read_text().splitlines():
        r = json.loads(line)
        if r.get("event") == "decision" and r.get("id") == f"{job}.0":
            return r
    return None


def test_killed_container_node_is_named_and_monitor_mode_only_records(
        docker_cluster: DockerCluster) -> None:  # noqa: F811
    dc, c = docker_cluster, docker_cluster.facts
    require_plugin(c)
    assert "recovery" not in c.gpualert_config.read_text(), "this test expects monitor mode"
    audit = c.spool / ".gpualert" / "recovery" / "audit.jsonl"
    d = make_workdir(c, "recovery_node_loss")
    job = clusterlib.submit(SCRIPT, "-N2", "--no-requeue", "--gpualert", "-o", "slurm-%j.out",
                            workdir=d)
    victim = None
    with clusterlib.cluster_lock(c):
        try:
            wait_state(job, "RUNNING", timeout=90, root=c.root)
            wait_until(lambda: all((d / f"running-{r}").exists() for r in (0, 1)), 60,
                       "both ranks running")
            info = slurm.show_job(job)
            victim = next(n for n in info.nodes if n != info.raw.get("BatchHost"))
            t0 = time.monotonic()
            dc.kill_node(victim)
            dec = wait_until(lambda: decision(audit, job), 150,
                             f"the recovery decision for job {job} in {audit}")
            print(f"decision {time.monotonic() - t0:.1f} s after {victim} was killed")
        finally:
            clusterlib.cancel_quietly(job)
            if victim:
                dc.restore_node(victim)
    assert dec["class"] == "node_failure" and dec["suspects"] == [victim], dec
    assert dec["mode"] == "monitor" and dec["planned"] == []
    assert {(w["action"], w["target"]) for w in dec["would"]} == {("drain_node", victim),
                                                                  ("requeue", str(job))}
    assert dec["exclude"] == [victim]
    reason = slurm.node_info(victim).reason
    assert not reason.startswith("gpualert:"), reason
    v = json.loads((c.spool / str(job) / "verdict.json").read_text())
    assert v["recovery"]["would"] and v["recovery"]["mode"] == "monitor", v.get("recovery")
