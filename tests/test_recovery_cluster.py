"""Recovery end to end on a real Slurm cluster: the job epilog hands each verdict to the policy,
which records (monitor) or carries out (action) its decision with Slurm's own commands.

Runs on its own native cluster (recoverylib: /var/lib/gpualert-cluster-recovery, ports +200),
never the shared one: these tests drain nodes and requeue jobs. A requeued job waits
cred_expire + 1 s (121 s) on 22.05; `scontrol update StartTime=now` once it is PENDING lets it
start at once (recoverylib.start_now_when_pending)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import clusterlib as cl
import pytest
from recoverylib import (
    GPUALERT,
    audit_records,
    cancel,
    gpualert,
    job_script,
    kernel_xid,
    node_reason,
    recovery_cluster,  # noqa: F401  (the fixture)
    resume_node,
    start_now_when_pending,
    wait_decision,
    wait_kernel_log_quiet,
    write_config,
)

from gpualert_slurm import recovery
from gpualert_slurm.core import slurm
from gpualert_slurm.core.config import load_config

pytestmark = pytest.mark.cluster
XID = "NVRM: Xid (PCI:0000:3b:00): {xid}, pid=4242, GPU has fallen off the bus."
NCCL = ("n1:123:456 [0] NCCL WARN NET/IB : Got completion from peer with error 12\n"
        "RuntimeError: NCCL communicator was aborted on rank 0. ncclRemoteError: network")


def results(audit: Path, did: str) -> list[dict]:
    return [r for r in audit_records(audit) if r.get("event") == "result" and r.get("id") == did]


# ---- node loss ------------------------------------------------------------------------------

def _lose_a_node(rc: cl.ClusterFacts, audit: Path) -> tuple[int, str, dict]:
    """A 2-node job; the slurmd of its non-batch node is killed mid-run. Returns (job, victim,
    decision)."""
    d = cl.make_workdir(rc, "nodeloss")
    job = cl.submit(job_script('srun -N2 -n2 bash -c \'touch "running-$SLURM_PROCID"; '
                               'exec sleep 300\''), "-N2", "--exclusive", workdir=d)
    cl.wait_until(lambda: all((d / f"running-{r}").exists() for r in (0, 1)), 120,
                  f"job {job} running on two nodes", diagnose=lambda: cl.diagnostics(job, rc.root))
    info = slurm.show_job(job)
    victim = next(n for n in info.nodes if n != info.raw.get("BatchHost"))
    os.kill(int(rc.slurmd_pidfile(victim).read_text().strip()), signal.SIGKILL)
    dec = wait_decision(audit, job, 0, timeout=120)
    return job, victim, dec


def test_node_lost_in_action_mode_is_drained_and_job_requeued_without_it(
        rc: cl.ClusterFacts, audit: Path) -> None:
    write_config(rc, audit, mode="action")
    job, victim = 0, ""
    try:
        job, victim, dec = _lose_a_node(rc, audit)
        assert dec["class"] == "node_failure" and dec["mode"] == "action", dec
        assert dec["suspects"] == [victim], dec
        state, reason = node_reason(victim)
        assert "DRAIN" in state and reason.startswith("gpualert: node_failure"), (state, reason)
        st = slurm.show_job(job)
        assert st.restarts == 1 and victim in slurm.expand_hostlist(st.raw["ExcNodeList"]), st.raw
        outs = {(r["action"], r["outcome"]) for r in results(audit, f"{job}.0")}
        assert ("drain_node", "done") in outs, outs
        st_json = json.loads(gpualert("status", "--json", cfg=rc).stdout)
        mine = next(j for j in st_json["jobs"] if j["job"] == str(job))
        assert mine["state"] == "recovering" and mine["attempt"] == 1, mine
        assert mine["retries_left"] == 1 and mine["last_decision"]["class"] == "node_failure"
        # the requeued run starts on the other nodes only
        start_now_when_pending(job, 1)
        st = cl.wait_state(job, "RUNNING", 60, rc.root)
        assert victim not in st.nodes, st.nodes
        hist = gpualert("history", "--job", str(job), cfg=rc).stdout
        assert f"job {job} attempt 0" in hist and f"drain_node {victim}: done" in hist, hist
    finally:
        cancel(job)
        if victim:
            cl.restore_node(rc, victim)


def test_node_lost_in_monitor_mode_changes_nothing_and_says_what_would_be_done(
        rc: cl.ClusterFacts, audit: Path) -> None:
    write_config(rc, audit, mode="monitor")
    job, victim = 0, ""
    try:
        job, victim, dec = _lose_a_node(rc, audit)
        assert dec["class"] == "node_failure" and dec["mode"] == "monitor"
        assert dec["planned"] == [] and {(w["action"], w["target"]) for w in dec["would"]} == {
            ("drain_node", victim), ("requeue", str(job))}
        assert all(n["why"] == "monitor mode" for n in dec["not_taken"]), dec["not_taken"]
        state, reason = node_reason(victim)
        assert not reason.startswith("gpualert:"), (state, reason)
        st = slurm.show_job(job)
        assert st.raw.get("ExcNodeList") in ("(null)", ""), st.raw  # Slurm's own requeue only
        assert not [r for r in audit_records(audit) if r.get("event") == "action"]
        v = json.loads((rc.spool / str(job) / "verdict.json").read_text())
        assert v["recovery"]["mode"] == "monitor" and v["recovery"]["would"], v["recovery"]
        # Slurm had requeued the job when its epilog ran: the run's state and kernel window
        # are accounting's, not the next run's record (StartTime 121 s ahead)
        ts = v["trusted"]["slurm"]
        assert ts["state"] == "NODE_FAIL" and ts["start"] and ts["start"] <= ts["end"], ts
    finally:
        cancel(job)
        if victim:
            cl.restore_node(rc, victim)


# ---- what is never, or no longer, retried ---------------------------------------------------

def test_python_exception_is_never_requeued(rc: cl.ClusterFacts, audit: Path) -> None:
    write_config(rc, audit, mode="action")
    d = cl.make_workdir(rc, "pyexc")
    job = cl.submit(job_script("python3 -c 'raise ValueError(\"bad input\")'"), workdir=d)
    try:
        dec = wait_decision(audit, job)
        assert dec["class"] == "python_exception" and dec["planned"] == [], dec
        assert dec["rule"] == "domain:workload"
        st = cl.wait_final(job, 60, rc.root)
        assert st.state == "FAILED" and slurm.job_state(job).restarts == 0
    finally:
        cancel(job)


def test_retry_budget_stops_a_job_failing_the_same_way(rc: cl.ClusterFacts,
                                                        audit: Path) -> None:
    write_config(rc, audit, mode="action", max_retries=1,
                 rules={"nccl_error": {"retries": 3}})
    d = cl.make_workdir(rc, "budget")
    job = cl.submit(job_script(f"cat <<'EOF'\n{NCCL}\nEOF\nexit 1"), workdir=d)
    try:
        first = wait_decision(audit, job, 0)
        assert first["class"] == "nccl_error" and first["planned"] == [
            {"action": "requeue", "target": str(job)}], first
        start_now_when_pending(job, 1)
        second = wait_decision(audit, job, 1, timeout=90)
        assert second["class"] == "nccl_error" and second["planned"] == [], second
        assert any("retry budget spent: 1 of 1" in n for n in second["notes"]), second
        st = cl.wait_final(job, 60, rc.root)
        assert st.state == "FAILED" and slurm.job_state(job).restarts == 1
    finally:
        cancel(job)


def test_no_checkpoint_progress_stops_the_retries(rc: cl.ClusterFacts, audit: Path) -> None:
    write_config(rc, audit, mode="action", max_retries=3, rules={"nccl_error": {"retries": 3}})
    d = cl.make_workdir(rc, "ckpt")
    body = ('mkdir -p ck\n[ "${SLURM_RESTART_COUNT:-0}" -lt 1 ] && touch ck/step1.pt\n'
            f"cat <<'EOF'\n{NCCL}\nEOF\nexit 1")
    job = cl.submit(job_script(body, "checkpoint=ck/*.pt"), workdir=d)
    try:
        first = wait_decision(audit, job, 0)
        assert first["planned"] and first["checkpoint_newest"], first
        start_now_when_pending(job, 1)
        second = wait_decision(audit, job, 1, timeout=90)
        assert second["planned"] == [], second
        assert any("no checkpoint progress" in n for n in second["notes"]), second
        cl.wait_final(job, 60, rc.root)
        assert slurm.job_state(job).restarts == 1
        v = json.loads((rc.spool / str(job) / "attempt-1" / "verdict.json").read_text())
        assert any("no checkpoint progress" in n for n in v["recovery"]["notes"])
    finally:
        cancel(job)


# ---- idempotence ----------------------------------------------------------------------------

def test_the_same_decision_twice_acts_once(rc: cl.ClusterFacts, audit: Path) -> None:
    """The epilog's decision again (same verdict) acts nothing; a decision interrupted after
    its actions (no outcome line: a restart mid-way) is resumed without repeating them."""
    write_config(rc, audit, mode="action")
    d = cl.make_workdir(rc, "twice")
    job = cl.submit(job_script(f"cat <<'EOF'\n{NCCL}\nEOF\nexit 1"), workdir=d)
    try:
        wait_decision(audit, job, 0)
        cl.wait_until(lambda: slurm.show_job(job).restarts == 1, 30, "the requeue")
        v = json.loads((rc.spool / str(job) / "verdict.json").read_text())
        cfg = load_config(str(rc.gpualert_config))
        again = recovery.on_verdict(cfg, v)
        assert again and again.get("repeat") and again["outcome"] == "completed", again
        # a crash mid-way: the same log without the outcome line; `gpualert watch` finishes
        # the decision from Slurm's state (recovery.timeout_s 2: older than 2 x 2 s)
        recs = [r for r in audit_records(audit)
                if not (r.get("event") == "outcome" and r.get("id") == f"{job}.0")]
        audit.write_text("".join(json.dumps(r) + "\n" for r in recs))
        write_config(rc, audit, mode="action", timeout_s=2)
        time.sleep(max(0.0, 4.5 - (time.time() - recs[0]["time"])))
        w = gpualert("watch", cfg=rc)
        assert w.returncode == 0 and '"resumed"' in w.stdout, w.stdout + w.stderr
        resumed = json.loads(next(ln for ln in w.stdout.splitlines() if "resumed" in ln))
        assert [t["outcome"] for t in resumed["resumed"]["taken"]] == ["done"], resumed
        assert any(r.get("event") == "outcome" and r.get("id") == f"{job}.0"
                   for r in audit_records(audit))
        acts = [r for r in audit_records(audit) if r.get("event") == "action"]
        assert len(acts) == 1 and acts[0]["action"] == "requeue", acts
        assert slurm.show_job(job).restarts == 1
    finally:
        cancel(job)


# ---- drains: someone else's, and the circuit breaker ----------------------------------------

def _gated_job(rc: cl.ClusterFacts, node: str, echo: str = "") -> tuple[int, Path]:
    """A job on `node` that waits for a `go` file, prints `echo`, and exits 1."""
    d = cl.make_workdir(rc, f"xid-{node}")
    body = "while [ ! -e go ]; do sleep 0.2; done\n" + (f"echo '{echo}'\n" if echo else "")
    return cl.submit(job_script(body + "exit 1"), "-w", node, workdir=d), d


def test_an_echoed_xid_line_drains_nothing_and_the_report_says_why(rc: cl.ClusterFacts,
                                                                  audit: Path) -> None:
    """The job printed the driver's Xid line; n2's kernel log has none: the verdict may say
    gpu_hardware, but only the job itself may be requeued (docs/SECURITY.md)."""
    write_config(rc, audit, mode="action")
    d = cl.make_workdir(rc, "echo-xid")
    job = cl.submit(job_script(f"echo '{XID.format(xid=79)}'\nexit 1"), "-w", "n2", workdir=d)
    try:
        dec = wait_decision(audit, job)
        assert dec["class"] == "gpu_hardware" and dec["trusted_suspects"] == [], dec
        assert not [p for p in dec["planned"] if p["action"] == "drain_node"], dec
        why = [n for n in dec["not_taken"] if n["action"] == "drain_node"]
        assert why and "printed by the job, not found in n2's kernel log" in why[0]["why"], dec
        assert not node_reason("n2")[1].startswith("gpualert:")
        assert not [r for r in audit_records(audit) if r.get("action") == "drain_node"
                    and r.get("event") in ("action", "result")]
        shown = gpualert("show", str(job), cfg=rc).stdout
        assert "[printed by the job]" in shown and "Not acted on: drain node n2: the Xid " \
            "line was printed by the job, not found in n2's kernel log." in shown, shown
    finally:
        cancel(job)


def test_a_node_drained_by_another_tool_keeps_its_reason(rc: cl.ClusterFacts,
                                                          audit: Path) -> None:
    write_config(rc, audit, mode="action", rules={"gpu_hardware": {"do": ["drain_node"]}})
    job, d = _gated_job(rc, "n2")
    try:
        cl.wait_state(job, "RUNNING", 60, rc.root)
        slurm.update_node("n2", "drain", "NHC: fan failure")
        kernel_xid(79)  # the driver's line in n2's kernel log, in the job's window
        cl.write_user_file(d / "go", "")
        dec = wait_decision(audit, job)
        assert dec["class"] == "gpu_hardware" and dec["suspects"] == ["n2"], dec
        res = results(audit, f"{job}.0")
        assert [(r["action"], r["outcome"]) for r in res] == [("drain_node", "kept")], res
        assert res[0]["before"]["reason"] == "NHC: fan failure"
        assert node_reason("n2")[1] == "NHC: fan failure"
        r = gpualert("resume", "n2", cfg=rc)
        assert r.returncode == 1 and "drained by someone else" in r.stderr
        assert node_reason("n2")[1] == "NHC: fan failure"
    finally:
        cancel(job)
        resume_node("n2")


def test_circuit_breaker_stops_a_burst_of_drains(rc: cl.ClusterFacts, audit: Path) -> None:
    write_config(rc, audit, mode="action", breaker={"share": 0.34, "window": "10m"},
                 rules={"gpu_hardware": {"do": ["drain_node"]}})
    jobs: list[int] = []
    decs = []
    try:
        # One kernel for the three "nodes": one job at a time, each with its own Xid in its
        # window (one line in three windows would be one signature on three nodes: a blast
        # radius, not three faults).
        for n, xid in (("n1", 79), ("n2", 48), ("n3", 63)):
            job, d = _gated_job(rc, n)
            jobs.append(job)
            cl.wait_state(job, "RUNNING", 60, rc.root)
            kernel_xid(xid)
            cl.write_user_file(d / "go", "")
            decs.append(wait_decision(audit, job))
        drained = [r["target"] for r in audit_records(audit) if r.get("event") == "result"
                   and r.get("action") == "drain_node" and r.get("outcome") == "done"]
        assert len(drained) == 1, audit.read_text()
        assert sum(1 for n in rc.nodes if node_reason(n)[1].startswith("gpualert:")) == 1
        refused = [n for d in decs for n in d["not_taken"] if "circuit breaker" in n["why"]]
        assert len(refused) == 2, decs
        assert any(r.get("event") == "breaker" and r.get("state") == "open"
                   for r in audit_records(audit))
        st = json.loads(gpualert("status", "--json", cfg=rc).stdout)
        assert "debug" in st["breakers"], st
        assert "CIRCUIT BREAKER OPEN" in gpualert("status", cfg=rc).stdout
        # reset by the admin; gpualert resumes its own drain
        assert gpualert("resume", "--breaker", cfg=rc).returncode == 0
        assert json.loads(gpualert("status", "--json", cfg=rc).stdout)["breakers"] == {}
        r = gpualert("resume", drained[0], cfg=rc)
        assert r.returncode == 0, r.stderr
        assert not slurm.node_info(drained[0]).drained
    finally:
        cancel(*jobs)


def test_repeated_reboots_for_one_xid_escalate_to_contact_support(rc: cl.ClusterFacts,
                                                                   audit: Path) -> None:
    """The GPU fault catalogue on root-written kernel lines: Xid 79 on n2 asks for a reboot
    (Slurm's Reason= says so); n2 resumed, the same Xid twice more: past the threshold (2
    drains for one code within the window, gpud's) the third drain holds n2 for support."""
    write_config(rc, audit, mode="action", max_retries=0,
                 breaker={"share": 1.0, "window": "1s"})
    jobs: list[int] = []
    reasons, decs = [], []
    try:
        for _ in range(3):
            wait_kernel_log_quiet()
            job, d = _gated_job(rc, "n2")
            jobs.append(job)
            cl.wait_state(job, "RUNNING", 60, rc.root)
            kernel_xid(79)
            cl.write_user_file(d / "go", "")
            decs.append(wait_decision(audit, job))
            did = f"{job}.0"
            cl.wait_until(lambda did=did: bool(results(audit, did)), 60, "the drain's result")
            reasons.append(node_reason("n2")[1])
            resume_node("n2")
        assert [d["xid"]["n2"]["bucket"] for d in decs] == \
            ["RESTART_BM", "RESTART_BM", "CONTACT_SUPPORT"], decs
        assert all(d["xid"]["n2"]["asked"] == "RESTART_BM" for d in decs)
        assert reasons[:2] == ["gpualert: Xid 79 (fallen off the bus): reboot"] * 2, reasons
        assert reasons[2].startswith("gpualert: Xid 79 (fallen off the bus): contact support "
                                     "(escalated: n2 was drained 2 times for Xid 79"), reasons
        shown = gpualert("show", str(jobs[-1]), cfg=rc).stdout
        assert "reported Xid 79 (fallen off the bus)" in shown and \
            "contact NVIDIA support" in shown, shown
    finally:
        cancel(*jobs)
        resume_node("n2")


# ---- the site's attribution command ---------------------------------------------------------

def test_attribution_command_that_fails_changes_nothing_but_the_audit_line(
        rc: cl.ClusterFacts, audit: Path) -> None:
    cmd = rc.root / "audit" / "attr.sh"
    cmd.write_text("#!/bin/bash\nv=$(cat)\ncase \"$v\" in\n"
                   "  *attr-hang*) sleep 60 ;;\n  *attr-crash*) kill -SEGV $$ ;;\n"
                   "  *) echo '{\"verdict\": 42}' ;;\nesac\n")
    cmd.chmod(0o755)
    write_config(rc, audit, mode="action",
                 attribution={"command": str(cmd), "timeout_s": 2})
    jobs = {}
    for kind in ("hang", "crash", "garbage"):
        d = cl.make_workdir(rc, f"attr-{kind}")
        jobs[kind] = cl.submit(job_script("python3 -c 'raise ValueError(1)'"),
                               f"--job-name=attr-{kind}", workdir=d)
    try:
        want = {"hang": "timeout", "crash": "failed", "garbage": "garbage"}
        for kind, job in jobs.items():
            dec = wait_decision(audit, job)
            assert dec["attribution"]["status"] == want[kind], dec["attribution"]
            assert dec["class"] == "python_exception" and dec["planned"] == [], dec
            assert slurm.job_state(job).restarts == 0
    finally:
        cancel(*jobs.values())


# ---- hang detection while the job runs (gpualert watch on the controller) -------------------

@contextlib.contextmanager
def watcher(rc: cl.ClusterFacts, interval: float = 3) -> Iterator[subprocess.Popen[str]]:
    """`gpualert watch --loop` as an admin runs it (a service on the controller)."""
    proc = subprocess.Popen([GPUALERT, "watch", "--loop", "--interval", str(interval)],
                            env={**os.environ, "GPUALERT_CONFIG": str(rc.gpualert_config)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(10)


def mail_text(f: Path) -> tuple[str, str]:
    """(subject, plain-text body) of a stored message."""
    import email
    from email import policy

    msg = email.message_from_bytes(f.read_bytes(), policy=policy.default)
    body = msg.get_body(preferencelist=("plain",))
    return str(msg["Subject"]), body.get_content() if body is not None else ""


def _mail_for(rc: cl.ClusterFacts, job: int, word: str) -> Path | None:
    for f in cl.mail_files(rc.maildir):
        t = f.read_text(errors="replace")
        if f"X-Gpualert-Job: {job}" in t and word in mail_text(f)[0]:
            return f
    return None


def test_a_job_that_stops_printing_is_reported_hung_while_it_runs(rc: cl.ClusterFacts,
                                                                  audit: Path) -> None:
    write_config(rc, audit, mode="monitor")
    d = cl.make_workdir(rc, "hung")
    job = cl.submit(job_script("echo 'epoch 1 loss 2.0'; sleep 240",
                               "mail=gpatest@localhost,hang=20s"), workdir=d)
    try:
        with watcher(rc):
            cl.wait_state(job, "RUNNING", 60, rc.root)
            log = rc.spool / str(job) / "tasks" / "batch.0.log"
            cl.wait_until(lambda: log.exists() and log.stat().st_size > 0, 30, "first output")
            last_output = log.stat().st_mtime
            mail = cl.wait_until(lambda: _mail_for(rc, job, "HUNG job"), 20 + 30 + 10,
                                 f"the hang alert for job {job}")
            arrived = mail.stat().st_mtime
            assert slurm.show_job(job).state == "RUNNING"  # reported while it still runs
            # the watcher mails first, then decides: its decision may come a moment later
            # (a full clean-clone run read the audit log before it, with the watcher gone)
            dec = cl.wait_until(lambda: next(
                (r for r in audit_records(audit) if r.get("event") == "decision"
                 and r.get("job") == str(job)), None), 60, f"job {job}'s hang decision")
        assert arrived - last_output <= 20 + 30, arrived - last_output
        assert "epoch 1 loss 2.0" in mail_text(mail)[1]  # the rank's last lines
        assert dec["class"] == "hang" and dec["id"].endswith(".hang")
    finally:
        cancel(job)


def test_a_rank_that_stops_while_the_others_go_on_is_named(rc: cl.ClusterFacts,
                                                           audit: Path) -> None:
    write_config(rc, audit, mode="monitor")
    d = cl.make_workdir(rc, "straggler")
    body = ("srun -n3 bash -c 'if [ $SLURM_PROCID = 1 ]; then echo rank 1 stuck; sleep 300; "
            "else for i in $(seq 300); do echo rank $SLURM_PROCID step $i; sleep 1; done; fi'")
    job = cl.submit(job_script(body, "mail=gpatest@localhost,hang=15s"), "-n3", workdir=d)
    try:
        with watcher(rc):
            mail = cl.wait_until(lambda: _mail_for(rc, job, "STRAGGLER"), 90,
                                 f"the straggler alert for job {job}")
            assert slurm.show_job(job).state == "RUNNING"
        subject, text = mail_text(mail)
        assert "the straggler is rank 0.1." in " ".join(text.split()), text
        assert "rank 0.1" in subject and "rank 0.0" not in subject and "0.2" not in subject
    finally:
        cancel(job)


# ---- fail open ------------------------------------------------------------------------------

def test_a_decision_over_its_bound_is_abandoned_and_says_so(rc: cl.ClusterFacts,
                                                            audit: Path) -> None:
    """slurmctld frozen (SIGSTOP) while an action-mode decision runs: it ends within its bound,
    does nothing, and the audit log says it was abandoned; the job is untouched."""
    write_config(rc, audit, mode="monitor")
    d = cl.make_workdir(rc, "failopen")
    job = cl.submit(job_script(f"cat <<'EOF'\n{NCCL}\nEOF\nexit 1"), workdir=d)
    ctld = int((rc.run_dir / "slurmctld.pid").read_text().strip())
    try:
        wait_decision(audit, job, 0)  # monitor mode: recorded only
        v = json.loads((rc.spool / str(job) / "verdict.json").read_text())
        write_config(rc, audit, mode="action", timeout_s=4)
        cfg = load_config(str(rc.gpualert_config))
        v["decision_id"] = f"{job}.0.failopen"
        os.kill(ctld, signal.SIGSTOP)
        try:
            t = time.monotonic()
            out = recovery.on_verdict(cfg, v)
            took = time.monotonic() - t
        finally:
            os.kill(ctld, signal.SIGCONT)
        assert took < 4 + 2, took
        assert out and out["outcome"] == "abandoned", out
        res = results(audit, f"{job}.0.failopen")
        assert res and res[-1]["outcome"] == "abandoned", res
        assert "Slurm's normal handling proceeds" in res[-1]["why"]
        assert not [r for r in audit_records(audit) if r.get("event") == "action"]
        assert slurm.job_state(job).restarts == 0
    finally:
        os.kill(ctld, signal.SIGCONT)
        cancel(job)


def test_a_hung_job_gets_the_configured_action(rc: cl.ClusterFacts, audit: Path) -> None:
    """recovery.rules.hang: {do: [requeue]} in action mode: the watcher's alert is followed by
    the requeue of the still-running job."""
    write_config(rc, audit, mode="action", rules={"hang": {"do": ["requeue"], "retries": 1}})
    d = cl.make_workdir(rc, "hung-requeue")
    job = cl.submit(job_script('[ "${SLURM_RESTART_COUNT:-0}" -lt 1 ] && { echo stuck; '
                               'sleep 300; }\necho second run ok',
                               "mail=gpatest@localhost,hang=15s"), workdir=d)
    try:
        with watcher(rc):
            cl.wait_until(lambda: slurm.show_job(job).restarts == 1, 90,
                          f"job {job} requeued for its hang")
        dec = next(r for r in audit_records(audit) if r.get("event") == "decision"
                   and r.get("id") == f"{job}.0.hang")
        assert dec["planned"] == [{"action": "requeue", "target": str(job)}], dec
        assert _mail_for(rc, job, "HUNG job") is not None
        start_now_when_pending(job, 1)
        st = cl.wait_final(job, 90, rc.root)
        assert st.state == "COMPLETED", st
    finally:
        cancel(job)
