"""Recovery on a real node loss: a container node killed (`docker kill`: slurmd, slurmstepd
and the ranks gone at once) on the container cluster, which others' tests share. So this
runs in the cluster's own (default) monitor mode: the decision must name the lost node and say
what action mode would do (drain it, requeue the job excluding it), and nothing is done.
The last test switches the container cluster to action mode under the cluster lock and puts
it back: a lost node drained by gpualert and the job requeued without it."""

from __future__ import annotations

import json

import pytest
from dockerlib import DockerCluster, docker_cluster, docker_cluster_session, lose_a_node  # noqa: F401
from spank_jobs import require_plugin

from gpualert_slurm.core import slurm

pytestmark = [pytest.mark.docker, pytest.mark.cluster]


def test_killed_container_node_is_named_and_monitor_mode_only_records(
        docker_cluster: DockerCluster) -> None:  # noqa: F811
    dc, c = docker_cluster, docker_cluster.facts
    require_plugin(c)
    assert "recovery" not in c.gpualert_config.read_text(), "this test expects monitor mode"
    loss = lose_a_node(dc, "recovery_node_loss")
    dec, victim, job = loss.decision, loss.victim, loss.job
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
    put back, and the node resumed, whatever happens (dockerlib.lose_a_node)."""
    dc, c = docker_cluster, docker_cluster.facts
    require_plugin(c)
    loss = lose_a_node(dc, "recovery_node_loss_action", action=True)
    dec, victim, node, st = loss.decision, loss.victim, loss.node, loss.requeued
    assert node is not None and st is not None
    assert dec["class"] == "node_failure" and dec["suspects"] == [victim], dec
    assert dec["mode"] == "action", dec
    assert "DRAIN" in node.flags and node.reason.startswith("gpualert: node_failure"), node
    assert st.restarts >= 1 and victim in str(st.raw.get("ExcNodeList")), st.raw
