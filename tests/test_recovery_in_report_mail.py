"""The recovery decision is in the mail: the job epilog decides (and records) before it sends
the report and acts after it, so the report says "requeued / not requeued, and why"."""

from __future__ import annotations

import email
import json
import time
from email import policy as email_policy
from pathlib import Path

import clusterlib as cl
import pytest

from gpualert_slurm.core.config import parse_config
from gpualert_slurm.recovery import on_verdict
from gpualert_slurm.recovery import policy as rpolicy
from gpualert_slurm.report import render
from gpualert_slurm.report.recovery_lines import report_lines

WORKLOAD_WHY = "a retry of the same program fails the same way"


def _cfg(tmp_path: Path, **recovery):
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o755, exist_ok=True)
    return parse_config({"spool": str(spool), "recovery": {
        "audit_log": str(tmp_path / "audit.jsonl"), **recovery}}, "x.yaml")


def _verdict(cls: str, domain: str, job: str = "4711") -> dict:
    return {"job_id": job, "attempt": 0, "failed": True,
            "job": {"nodes": ["n1", "n2"], "partition": "", "user": "gpatest"},
            "options": {},
            "verdict": {"class": cls, "domain": domain, "root_node": "n2", "root_rank": 1,
                        "evidence": [{"file": "x", "line": 3, "text": "boom"}]}}


def _audit(tmp_path: Path) -> list[dict]:
    return [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]


def test_a_workload_failure_says_why_it_is_not_requeued(tmp_path):
    cfg = _cfg(tmp_path)
    v = _verdict("python_exception", "workload")
    r = on_verdict(cfg, v, act=False)
    assert r["outcome"] == "recorded" and WORKLOAD_WHY in r["not_retried"]
    lines = report_lines(r)
    assert any(ln.startswith("Not requeued: " + WORKLOAD_WHY) and "domain:workload" in ln
               for ln in lines), lines
    assert not any(ln.startswith("Retries left") for ln in lines), lines
    # the report renders it, text and HTML
    v["recovery"] = r
    for kind in ("text", "html"):
        assert f"Recovery: Not requeued: {WORKLOAD_WHY}" in render(v, kind)
    # the second call (after the report) does not decide again
    again = on_verdict(cfg, v)
    assert again["outcome"] == "recorded" and again.get("repeat")
    assert [x["event"] for x in _audit(tmp_path)] == ["decision", "outcome"]


def test_a_site_rule_that_does_not_requeue_is_named(tmp_path):
    cfg = _cfg(tmp_path, rules={"nccl_error": {"do": []}})
    r = on_verdict(cfg, _verdict("nccl_error", "infrastructure"), act=False)
    assert r["not_retried"] == "the site's recovery rule nccl_error does not requeue nccl_error"


def test_action_mode_decides_before_the_report_and_acts_after(tmp_path):
    """act=False records the decision and its plan and does nothing to Slurm; the mail says
    what follows; the decision stays open for the act=True call (or `gpualert watch`)."""
    cfg = _cfg(tmp_path, mode="action")
    r = on_verdict(cfg, _verdict("nccl_error", "infrastructure"), act=False)
    assert r["outcome"] == "planned", r
    assert r["planned"] == [{"action": "requeue", "target": "4711"}] and r["taken"] == []
    assert [x["event"] for x in _audit(tmp_path)] == ["decision"]  # no action, no outcome
    lines = report_lines(r)
    assert "gpualert requeues the job now (right after this report)." in lines, lines
    assert "Retries left for this job: 1." in lines


def test_a_planned_drain_counts_for_the_breaker_until_it_is_done():
    """Between the decision (before the mail) and its actions (after), another job's
    decision must see the planned drain, or both drain past the breaker."""
    cfg = parse_config({"recovery": {"mode": "action"}}, "x").recovery
    now = time.time()
    pending = {"event": "decision", "id": "1.0", "job": "1", "partition": "p", "time": now,
               "planned": [{"action": "drain_node", "target": "n1"},
                           {"action": "requeue", "target": "1"}]}
    # n2's fault is root's fact (issue 17: only such a node is drained or counted)
    facts = rpolicy.JobFacts(job_id="2", attempt=0, partition="p", nodes=("n2",),
                             suspects=("n2",), partition_size=3, time=now,
                             proven=(("n2", "kernel log of n2: NVRM: Xid 79"),),
                             node_set=("n1", "n2", "n3"))
    v = {"verdict": {"class": "gpu_hardware", "domain": "infrastructure",
                     "evidence": [{"text": "NVRM: Xid 79: GPU has fallen off the bus"}]}}
    d = rpolicy.decide(cfg, v, facts, [pending])
    assert d.trip_breaker and not any(p["action"] == "drain_node" for p in d.planned)
    done = {"event": "outcome", "id": "1.0", "outcome": "failed", "time": now}
    d = rpolicy.decide(cfg, v, facts, [pending, done])  # its drain did not happen: not counted
    assert any(p["action"] == "drain_node" and p["target"] == "n2" for p in d.planned)


@pytest.mark.cluster
def test_the_mail_of_a_failed_job_says_it_is_not_requeued_and_why(cluster, workdir):
    """The shared cluster (monitor mode, the installed copy: `make install`): a Python
    exception's mail carries the decision, and verdict.json has the same."""
    script = ("#!/bin/bash\n#SBATCH --gpualert=mail=gpatest@localhost\n"
              "python3 -c \"raise ValueError('shard 3 has 0 samples')\"\n")
    job = cl.submit(script, workdir=workdir)
    cl.wait_final(job, 120, cluster.root)
    pat = f"X-Gpualert-Job: {job}".encode()
    [mail] = cl.wait_until(
        lambda: [p for p in cl.mail_files(cluster.maildir) if pat in p.read_bytes()], 90,
        f"the mail of job {job}")
    msg = email.message_from_bytes(mail.read_bytes(), policy=email_policy.default)
    text = msg.get_body(("plain",)).get_content()
    html = msg.get_body(("html",)).get_content()
    assert f"Recovery: Not requeued: {WORKLOAD_WHY}" in text, text
    assert f"Recovery: Not requeued: {WORKLOAD_WHY}" in html
    v = json.loads((cluster.spool / str(job) / "verdict.json").read_text())
    assert v["verdict"]["class"] == "python_exception"
    assert v["recovery"]["outcome"] == "recorded" and WORKLOAD_WHY in v["recovery"]["not_retried"]
