"""`gpualert metrics`: node_exporter's textfile format from the spool, the outbox and the audit
log, parsed back with prometheus_client's own text parser. The spool is built with the writers
the hooks use (root's verdict.json per attempt, the real Outbox, the real AuditLog), plus what a
user can plant in their own job directory; the last test reads a real job's verdict on the
cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpualert_slurm.core.config import parse_config
from gpualert_slurm.core.spool import opened_dir, write_json_atomic
from gpualert_slurm.notify.outbox import Outbox, new_id
from gpualert_slurm.recovery.audit import AuditLog

REPO = Path(__file__).resolve().parent.parent
USER_UID = 4242  # the job dirs' owner: a user, not root


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value, through prometheus_client's parser (which
    raises on anything that is not the text format)."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(parsed: dict, name: str, **labels: str) -> float | None:
    return parsed.get((name, tuple(sorted(labels.items()))))


def trusted(nodes: list[str], partition: str = "gpu", xid_on: str | None = None,
            verified: bool = True) -> dict[str, Any]:
    """verdict.json's "trusted" block as the job epilog writes it (classify/node_trust.py)."""
    out: dict[str, Any] = {"slurm": {"nodes": nodes, "partition": partition, "state": "FAILED",
                                     "user": "alice"}, "nodes": {}}
    for n in nodes:
        driver = []
        if n == xid_on:
            driver = [{"text": "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off "
                       "the bus.", "time": 1.0, "pci": "0000:3b:00", "xid": 79,
                       "classes": ["gpu_hardware"]}]
        out["nodes"][n] = {"verified": verified, "origin": "munge", "why": None,
                           "driver": driver, "nvml_changed": [], "kernel_lines": len(driver)}
    return out


def verdict(job: str, attempt: int, cls: str, t: dict[str, Any], failed: bool = True,
            report: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"job_id": job, "attempt": attempt, "failed": failed, "silent_failure": False,
            "verdict": {"class": cls, "root_node": t["slurm"]["nodes"][0]}, "trusted": t,
            "report": report or {"status": "sent"}}


def job_dir(spool: Path, job: str, attempt: int = 0) -> Path:
    d = spool / job
    d.mkdir(mode=0o700, exist_ok=True)
    os.chown(d, USER_UID, USER_UID)
    (d / "tasks").mkdir(exist_ok=True)  # as the Prolog makes them
    if attempt:
        d = d / f"attempt-{attempt}"
        d.mkdir(mode=0o700, exist_ok=True)
        os.chown(d, USER_UID, USER_UID)
    return d


def put(spool: Path, job: str, v: dict[str, Any], attempt: int = 0) -> Path:
    """verdict.json as the job epilog (root) writes it: atomically, 0644, root's."""
    d = job_dir(spool, job, attempt)
    with opened_dir(str(d)) as fd:
        write_json_atomic(fd, "verdict.json", v, 0o644)
    return d / "verdict.json"


@pytest.fixture
def site(tmp_path: Path) -> tuple[Path, Any]:
    spool = tmp_path / "spool"
    spool.mkdir()
    os.chmod(spool, 0o755)
    cfg = parse_config({"spool": str(spool), "recovery": {"escalate_after": 2}},
                       str(tmp_path / "gpualert.yaml"))
    return spool, cfg


def run_metrics(cfg: Any, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    conf = Path(cfg.path)
    conf.write_text(json.dumps({"spool": cfg.spool, "recovery": {"escalate_after": 2}}))
    return subprocess.run([sys.executable, "-m", "gpualert_slurm", "metrics", "--config",
                           str(conf), "--output", str(out), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_failures_reports_recovery_and_breaker(site, tmp_path):
    spool, cfg = site
    # failures: two OOMs on gpu (one a second attempt), a timeout on debug
    put(spool, "101", verdict("101", 0, "cuda_oom", trusted(["n1", "n2"])))
    put(spool, "101", verdict("101", 1, "cuda_oom", trusted(["n1"])), attempt=1)
    put(spool, "102", verdict("102", 0, "time_limit", trusted(["n3"], "debug")))
    put(spool, "103", verdict("103", 0, "success", trusted(["n3"]), failed=False))
    # the outbox: one waiting (job 109's report), one quarantined
    ob = Outbox(os.path.join(str(spool), ".outbox")).open()
    with ob:
        waiting = new_id("109", "mail")
        ob.put(waiting, b"Subject: x\n\nx\n", {"job_id": "109", "channel": "mail",
                                               "created": time.time()})
        gone = new_id("110", "mail")  # queued by the epilog, sent by flush since
        q = new_id("111", "lab-slack")
        ob.put(q, b"Subject: y\n\ny\n", {"job_id": "111", "channel": "lab-slack"})
        ob.quarantine(q, {"job_id": "111", "channel": "lab-slack", "reason": "HTTP 404"})
    put(spool, "109", verdict("109", 0, "nccl_error", trusted(["n1"]), report={
        "status": "queued", "outbox": ob.entry_path(waiting)}))
    put(spool, "110", verdict("110", 0, "nccl_error", trusted(["n1"]), report={
        "status": "queued", "outbox": ob.entry_path(gone)}))
    # the audit log: decisions in both modes, results, a breaker opened on gpu, debug reset
    audit = AuditLog(os.path.join(str(spool), ".gpualert", "recovery", "audit.jsonl"))
    audit.append({"event": "decision", "id": "101.0", "mode": "monitor",
                  "would": [{"action": "requeue", "target": "101"}], "planned": []})
    audit.append({"event": "decision", "id": "104.0", "mode": "action",
                  "planned": [{"action": "drain_node", "target": "n2"},
                              {"action": "requeue", "target": "104"}], "would": []})
    audit.append({"event": "decision", "id": "102.0", "mode": "action", "planned": []})
    audit.append({"event": "result", "id": "104.0", "action": "drain_node", "target": "n2",
                  "outcome": "done"})
    audit.append({"event": "breaker", "partition": "gpu", "state": "open"})
    audit.append({"event": "breaker", "partition": "debug", "state": "open"})
    audit.append({"event": "breaker", "partition": "debug", "state": "reset"})

    out = tmp_path / "textfile" / "gpualert.prom"  # its directory made as needed
    p = run_metrics(cfg, out)
    assert p.returncode == 0, p.stderr
    text = out.read_text()
    m = samples(text)
    assert value(m, "gpualert_failed_jobs", **{"class": "cuda_oom", "partition": "gpu"}) == 2
    assert value(m, "gpualert_failed_jobs", **{"class": "time_limit", "partition": "debug"}) == 1
    assert value(m, "gpualert_failed_jobs", **{"class": "success", "partition": "gpu"}) is None
    assert value(m, "gpualert_failed_jobs_by_node", **{"class": "cuda_oom", "node": "n1"}) == 2
    assert value(m, "gpualert_failed_jobs_by_node", **{"class": "cuda_oom", "node": "n2"}) == 1
    # reports: 4 sent at once + 110's, sent by flush; 109's waits
    assert value(m, "gpualert_reports", status="sent") == 5
    assert value(m, "gpualert_reports", status="waiting") == 1
    assert value(m, "gpualert_outbox_messages", state="waiting", channel="mail") == 1
    assert value(m, "gpualert_outbox_messages", state="quarantined", channel="lab-slack") == 1
    assert value(m, "gpualert_recovery_decisions_total", action="requeue", mode="monitor") == 1
    assert value(m, "gpualert_recovery_decisions_total", action="requeue", mode="action") == 1
    assert value(m, "gpualert_recovery_decisions_total", action="drain_node", mode="action") == 1
    assert value(m, "gpualert_recovery_decisions_total", action="none", mode="action") == 1
    assert value(m, "gpualert_recovery_action_results_total", action="drain_node",
                 outcome="done") == 1
    assert value(m, "gpualert_breaker_open", partition="gpu") == 1
    assert value(m, "gpualert_breaker_open", partition="debug") == 0
    assert value(m, "gpualert_metrics_complete") == 1
    assert value(m, "gpualert_metrics_verdicts") == 6
    # every family has HELP and TYPE, counters end in _total (what promtool checks)
    for fam in text_string_to_metric_families(text):
        assert fam.documentation, fam.name
        assert fam.type in ("gauge", "counter"), fam.name
    assert "# TYPE gpualert_recovery_decisions_total counter" in text
    assert sorted(os.listdir(out.parent)) == ["gpualert.prom"]  # no temporary file left


def test_repeated_hardware_counts_only_roots_facts_of_the_node(site, tmp_path):
    spool, cfg = site
    # hardware on n2 twice, backed by n2's own kernel log (root's, sealed): repeated
    put(spool, "104", verdict("104", 0, "gpu_hardware", trusted(["n2"], xid_on="n2")))
    put(spool, "105", verdict("105", 0, "gpu_hardware", trusted(["n2", "n4"], xid_on="n2")))
    # hardware the job only printed (no driver line in n4's kernel log): not n4's
    put(spool, "106", verdict("106", 0, "gpu_hardware", trusted(["n4"])))
    put(spool, "107", verdict("107", 0, "gpu_hardware", trusted(["n4"])))
    # a node record that could not be verified as root's: not counted either
    put(spool, "108", verdict("108", 0, "gpu_hardware", trusted(["n5"], xid_on="n5",
                                                                   verified=False)))
    out = tmp_path / "gpualert.prom"
    p = run_metrics(cfg, out)
    assert p.returncode == 0, p.stderr
    m = samples(out.read_text())
    # hardware: n2 twice from its own kernel log; n4 (printed) and n5 (unverified) never
    assert value(m, "gpualert_node_hardware_verdicts", node="n2") == 2
    assert value(m, "gpualert_node_hardware_verdicts", node="n4") is None
    assert value(m, "gpualert_node_hardware_verdicts", node="n5") is None
    assert value(m, "gpualert_node_repeated_hardware", node="n2") == 1
    assert value(m, "gpualert_nodes_repeated_hardware") == 1
    # all five are failures by class, whoever backs them
    assert value(m, "gpualert_failed_jobs", **{"class": "gpu_hardware", "partition": "gpu"}) == 5


def test_what_a_user_plants_in_their_job_dir_never_counts(site, tmp_path):
    spool, cfg = site
    put(spool, "201", verdict("201", 0, "gpu_hardware", trusted(["n7"], xid_on="n7")))
    # the job's user writes their own verdict.json claiming a hardware failure on n7
    d = job_dir(spool, "202")
    (d / "verdict.json").write_text(json.dumps(verdict("202", 0, "gpu_hardware",
                                                       trusted(["n7"], xid_on="n7"))))
    os.chown(d / "verdict.json", USER_UID, USER_UID)
    # ... or links root's verdict of job 201 into their attempt directory (not this run)
    d3 = job_dir(spool, "203")
    os.symlink(spool / "201" / "verdict.json", d3 / "verdict.json")
    # ... or hard-links a root file that names this run (seen by root as two links)
    d4 = job_dir(spool, "204")
    outside = tmp_path / "root-file.json"
    outside.write_text(json.dumps(verdict("204", 0, "gpu_hardware", trusted(["n7"], xid_on="n7"))))
    os.link(outside, d4 / "verdict.json")
    # ... or a FIFO (would block a reader that opens it without O_NONBLOCK)
    d5 = job_dir(spool, "205")
    os.mkfifo(d5 / "verdict.json")
    # ... or root's own verdict for another job renamed in (a user can rename root's files)
    put(spool, "206", verdict("299", 0, "gpu_hardware", trusted(["n7"], xid_on="n7")))
    # ... or a huge one
    d7 = job_dir(spool, "207")
    with opened_dir(str(d7)) as fd:
        write_json_atomic(fd, "verdict.json", {**verdict("207", 0, "gpu_hardware",
                                                         trusted(["n7"], xid_on="n7")),
                                               "pad": "x" * (2 << 20)})
    # ... and a directory name that is not a job id
    (spool / "..bad").mkdir()
    out = tmp_path / "gpualert.prom"
    t0 = time.monotonic()
    p = run_metrics(cfg, out)
    assert p.returncode == 0, p.stderr
    assert time.monotonic() - t0 < 30  # the FIFO blocked nothing
    m = samples(out.read_text())
    assert value(m, "gpualert_node_hardware_verdicts", node="n7") == 1  # job 201 alone
    assert value(m, "gpualert_nodes_repeated_hardware") == 0
    assert value(m, "gpualert_metrics_verdicts") == 1
    # 202 (user's), 203 (symlink), 204 (second link), 205 (FIFO), 206 (another run), 207 (size)
    assert value(m, "gpualert_metrics_read_errors", source="verdict") == 6
    assert value(m, "gpualert_metrics_job_dirs") == 7


def test_output_replaced_atomically_and_time_limit_is_a_partial_pass(site, tmp_path):
    spool, cfg = site
    for j in range(300, 340):
        put(spool, str(j), verdict(str(j), 0, "cuda_oom", trusted(["n1"])))
    out = tmp_path / "gpualert.prom"
    victim = tmp_path / "victim"
    victim.write_text("not ours\n")
    out.symlink_to(victim)  # replaced, never written through
    p = run_metrics(cfg, out, "--time-limit", "0")
    assert p.returncode == 0, p.stderr
    assert "partial" in p.stdout
    assert victim.read_text() == "not ours\n" and not out.is_symlink()
    m = samples(out.read_text())
    assert value(m, "gpualert_metrics_complete") == 0
    assert value(m, "gpualert_metrics_job_dirs") == 0
    p = run_metrics(cfg, out)
    m = samples(out.read_text())
    assert value(m, "gpualert_metrics_complete") == 1
    assert value(m, "gpualert_metrics_job_dirs") == 40
    assert value(m, "gpualert_failed_jobs", **{"class": "cuda_oom", "partition": "gpu"}) == 40


def test_label_values_are_escaped(site, tmp_path):
    spool, cfg = site
    t = trusted(['n"1\\x'], partition="weird\npart")
    put(spool, "401", verdict("401", 0, "cuda_oom", t))
    out = tmp_path / "gpualert.prom"
    assert run_metrics(cfg, out).returncode == 0
    m = samples(out.read_text())
    assert value(m, "gpualert_failed_jobs", **{"class": "cuda_oom",
                                               "partition": "weird\npart"}) == 1
    assert value(m, "gpualert_failed_jobs_by_node", **{"class": "cuda_oom",
                                                       "node": 'n"1\\x'}) == 1


def test_metrics_of_a_real_failing_job_on_the_cluster(cluster, workdir, tmp_path):
    import clusterlib

    script = ("#!/bin/bash\n#SBATCH -N1 -o out.%j\n"
              "python3 -c \"raise MemoryError('CUDA out of memory. Tried to allocate 2.00 "
              "GiB')\"\n")
    job = clusterlib.submit(script, "--gpualert", workdir=workdir)
    st = clusterlib.wait_final(job, root=cluster.root)
    assert st.state == "FAILED"
    path = cluster.spool / str(job) / "verdict.json"
    clusterlib.wait_until(lambda: path.exists() and "report" in json.loads(path.read_text()),
                          90, f"job {job}'s verdict and report")
    v = json.loads(path.read_text())
    out = tmp_path / "gpualert.prom"
    p = subprocess.run([sys.executable, "-m", "gpualert_slurm", "metrics", "--config",
                        str(cluster.gpualert_config), "--output", str(out)], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    m = samples(out.read_text())
    cls, part = v["verdict"]["class"], v["trusted"]["slurm"]["partition"]
    assert cls == "cuda_oom" and part == "debug"
    assert value(m, "gpualert_failed_jobs", **{"class": cls, "partition": part}) >= 1
    node = v["trusted"]["slurm"]["nodes"][0]
    assert value(m, "gpualert_failed_jobs_by_node", **{"class": cls, "node": node}) >= 1
    assert value(m, "gpualert_reports", status="sent") >= 1
    assert value(m, "gpualert_metrics_complete") == 1
    assert value(m, "gpualert_metrics_verdicts") >= 1
