"""Recovery on a real node loss: a container node killed (`docker kill`: slurmd, slurmstepd
and the ranks gone at once) on the container cluster, which others' tests share. So this
runs in the cluster's own (default) monitor mode: the decision must name the lost node and say
what action mode would do (drain it, requeue the job excluding it), and nothing is done.
The last test switches the container cluster to action mode under the cluster lock and puts
it back: a lost node drained by gpualert and the job requeued without it."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

import clusterlib
import pytest
import yaml
from clusterlib import make_workdir, wait_state, wait_until
from dockerlib import DockerCluster, docker_cluster, docker_cluster_session  # noqa: F401
from spank_jobs import require_plugin

from gpualert_slurm.core import slurm

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


def test_killed_container_node_in_action_mode_is_drained_and_the_job_requeued_without_it(
        docker_cluster: DockerCluster) -> None:  # noqa: F811
    """The issue's own case: action mode, a node really lost (its container killed). gpualert
    drains it with a reason naming gpualert and the evidence, and requeues the job excluding
    it. The container cluster's config is switched to action mode under the cluster lock and
    put back, and the node resumed, whatever happens."""
    dc, c = docker_cluster, docker_cluster.facts
    require_plugin(c)
    audit = c.spool / ".gpualert" / "recovery" / "audit.jsonl"
    d = make_workdir(c, "recovery_node_loss_action")
    saved = c.gpualert_config.read_text()
    victim = None
    job = None
    with clusterlib.cluster_lock(c):
        try:
            doc = yaml.safe_load(saved) or {}
            doc["recovery"] = {"mode": "action",
                               "actions": ["requeue", "exclude_node", "drain_node"]}
            tmp = c.gpualert_config.with_suffix(".tmp")
            tmp.write_text(yaml.safe_dump(doc))
            tmp.chmod(0o644)
            os.replace(tmp, c.gpualert_config)
            job = clusterlib.submit(SCRIPT, "-N2", "--requeue", "--gpualert", "-o",
                                    "slurm-%j.out", "--open-mode=append", workdir=d)
            wait_state(job, "RUNNING", timeout=90, root=c.root)
            wait_until(lambda: all((d / f"running-{r}").exists() for r in (0, 1)), 60,
                       "both ranks running")
            info = slurm.show_job(job)
            victim = next(n for n in info.nodes if n != info.raw.get("BatchHost"))
            dc.kill_node(victim)
            dec = wait_until(lambda: decision(audit, job), 150,
                             f"the recovery decision for job {job} in {audit}")
            # The actions follow the decision record (fsynced first): wait for Slurm to show them.
            wait_until(lambda: slurm.node_info(victim).reason.startswith("gpualert:"), 60,
                       f"{victim} drained by gpualert")
            wait_until(lambda: victim in str(slurm.show_job(job).raw.get("ExcNodeList", "")),
                       60, f"job {job} to exclude {victim}")
            node = slurm.node_info(victim)
            st = slurm.show_job(job)
        finally:
            tmp = c.gpualert_config.with_suffix(".tmp")
            tmp.write_text(saved)
            tmp.chmod(0o644)
            os.replace(tmp, c.gpualert_config)
            if job:
                clusterlib.cancel_quietly(job)
            if victim:
                # gpualert's drain outlives the container's restart: resume it (refused while
                # the node is still down), bring the container back, resume once more.
                with contextlib.suppress(slurm.SlurmError):
                    slurm.update_node(victim, "resume")
                with contextlib.suppress(AssertionError):
                    dc.restore_node(victim)
                with contextlib.suppress(slurm.SlurmError):
                    slurm.update_node(victim, "resume")
                dc.restore_node(victim)
    assert dec["class"] == "node_failure" and dec["suspects"] == [victim], dec
    assert dec["mode"] == "action", dec
    assert "DRAIN" in node.flags and node.reason.startswith("gpualert: node_failure"), node
    assert st.restarts >= 1 and victim in str(st.raw.get("ExcNodeList")), st.raw
