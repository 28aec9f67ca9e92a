"""The trust boundary on the action-mode recovery cluster (docs/SECURITY.md, issue 17): the
attacks run as the unprivileged test user and are each asserted harmless (no node drained or
flagged, no other job touched, nothing from before the job in its verdict), and real failures
(a driver Xid root writes to the kernel log, a killed slurmd, a frozen node) still drain and
requeue in action mode and are only recommended in monitor mode.

Runs on the recovery cluster (recoverylib: its own ports, an exclusive-use lock). Its three
"nodes" share this machine's kernel, so a kernel line counts for a job by Slurm's window: a
test writes one while its job runs, and the jobs of a test that must not see it have ended."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import clusterlib as cl
import pytest
from recoverylib import (
    XID_LINE,
    audit_records,
    cancel,
    gpualert,
    job_script,
    kernel_xid,
    node_reason,
    recovery_cluster,  # noqa: F401  (the fixture)
    resume_node,
    wait_decision,
    write_config,
    write_kmsg,
)

from gpualert_slurm.core import slurm

pytestmark = pytest.mark.cluster
XID = XID_LINE.format(xid=79)


def verdict_of(rc: cl.ClusterFacts, job: int) -> dict[str, Any]:
    return json.loads((rc.spool / str(job) / "verdict.json").read_text())


def drained_by_gpualert(rc: cl.ClusterFacts) -> list[str]:
    return [n for n in rc.nodes if node_reason(n)[1].startswith("gpualert:")]


def assert_harmless(rc: cl.ClusterFacts, audit: Path, others: tuple[int, ...] = ()) -> None:
    """No node drained or flagged, no breaker moved, no other job touched."""
    recs = audit_records(audit)
    assert drained_by_gpualert(rc) == [], [node_reason(n) for n in rc.nodes]
    assert not [r for r in recs if r.get("action") == "drain_node"
                and r.get("event") in ("action", "result")], recs
    assert not [r for r in recs if r.get("event") == "breaker"], recs
    decs = [r for r in recs if r.get("event") == "decision"]
    assert all(not d.get("flagged_nodes") and not d.get("trusted_suspects") for d in decs), decs
    for j in others:
        assert slurm.job_state(j).restarts == 0, slurm.show_job(j).raw
        assert not [r for r in recs if r.get("job") == str(j)], recs


def _gated(rc: cl.ClusterFacts, node: str, body: str = "exit 1", user: str = cl.TEST_USER
           ) -> tuple[int, Path]:
    d = cl.make_workdir(rc, f"gated-{node}", user=user)
    job = cl.submit(job_script("while [ ! -e go ]; do sleep 0.2; done\n" + body),
                    "-w", node, workdir=d, user=user)
    return job, d


# ---- attack 1: printed text and a rewritten exit record name other nodes ------------------

def test_printed_lines_and_a_rewritten_exit_record_touch_no_other_node(
        rc: cl.ClusterFacts, audit: Path) -> None:
    write_config(rc, audit, mode="action", breaker={"share": 1.0})
    d = cl.make_workdir(rc, "attack1")
    exit_rec = rc.spool / "$SLURM_JOB_ID" / "tasks" / "0.0.exit"
    body = (f"srun -n1 bash -c \"echo '{XID}'; exit 1\"\n"
            # the exit record is the user's own file: make it say n2
            f"python3 - \"{exit_rec}\" <<'EOF'\n"
            "import json, sys\np = sys.argv[1]\nr = json.load(open(p))\nr['node'] = 'n2'\n"
            "open(p, 'w').write(json.dumps(r))\nprint('exit record now says n2')\nEOF\n"
            "echo 'srun: error: n3: task 0: Exited with exit code 1'\n"
            f"echo '{XID}'\nexit 1")
    job = cl.submit(job_script(body), "-w", "n1", workdir=d)
    try:
        dec = wait_decision(audit, job)
        assert dec["class"] == "gpu_hardware", dec
        out = (d / f"slurm-{job}.out").read_text()
        assert "exit record now says n2" in out, out  # the attack ran as written
        assert_harmless(rc, audit)
        refused = {n.get("target"): n["why"] for n in dec["not_taken"]
                   if n["action"] == "drain_node"}
        assert refused and all(t == "n1" or "Slurm did not run this attempt on" in w
                               for t, w in refused.items()), dec
        # the job's own requeue leaves out no node but its own
        exc = [p for p in dec["planned"] if p["action"] == "requeue"]
        assert set(dec["exclude"]) <= {"n1"} and exc, dec
        st = slurm.show_job(job)
        assert not {"n2", "n3"} & set(slurm.expand_hostlist(
            str(st.raw.get("ExcNodeList", "")).replace("(null)", ""))), st.raw
        v = verdict_of(rc, job)
        labels = {e["provenance"]["label"] for e in v["verdict"]["evidence"]}
        assert labels == {"printed by the job"}, v["verdict"]["evidence"]
        assert v["trusted"]["slurm"]["nodes"] == ["n1"], v["trusted"]
    finally:
        cancel(job)


# ---- attack 2: a file named like a driver line, in the kernel's trap line ------------------

TRAP = r'''import ctypes, os
name = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."
with open(name, "wb") as f:
    f.write(b"\x0f\x0b" * 2048)  # ud2: an invalid opcode
fd = os.open(name, os.O_RDONLY)
libc = ctypes.CDLL(None)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
ctypes.CFUNCTYPE(None)(libc.mmap(None, 4096, 5, 2, fd, 0))()  # PROT_READ|EXEC, MAP_PRIVATE
'''


def test_a_users_file_name_in_the_kernel_log_judges_no_job(rc: cl.ClusterFacts,
                                                         audit: Path) -> None:
    write_config(rc, audit, mode="action", breaker={"share": 1.0})
    victim, vd = _gated(rc, "n2", "exit 0", user="root")
    d = cl.make_workdir(rc, "attack2")
    cl.write_user_file(d / "trap.py", TRAP, mode=0o644)
    attacker = 0
    try:
        cl.wait_state(victim, "RUNNING", 60, rc.root)
        attacker = cl.submit(job_script("python3 trap.py; exit 1"), "-w", "n2", workdir=d)
        dec = wait_decision(audit, attacker)
        assert "trap invalid opcode" in subprocess.run(
            ["dmesg", "--time-format", "iso"], capture_output=True, text=True).stdout
        (vd / "go").write_text("")
        st = cl.wait_final(victim, 90, rc.root)
        assert st.state == "COMPLETED" and st.restarts == 0, st
        cl.wait_until(lambda: (rc.spool / str(victim) / "verdict.json").exists(), 60,
                      "root's job's verdict")
        v = verdict_of(rc, victim)
        assert v["verdict"]["class"] == "success" and not v["failed"], v["verdict"]
        assert not any("NVRM" in ln for k in v["nodes"].values()
                       for ln in (k.get("kernel") or {}).get("lines") or []), v["nodes"]
        assert dec["class"] != "gpu_hardware", dec
        assert_harmless(rc, audit, others=(victim,))
    finally:
        cancel(victim, attacker)


# ---- attack 5 and a real Xid: paced printed failures move no breaker; the real one drains --

def test_paced_printed_failures_drain_nothing_and_a_real_xid_still_drains(
        rc: cl.ClusterFacts, audit: Path) -> None:
    # 1 drain allowed on the 3 nodes: a user who could drain or trip it would show here
    write_config(rc, audit, mode="action", breaker={"share": 0.34, "window": "1h"})
    jobs: list[int] = []
    try:
        for node, other in (("n1", "n2"), ("n2", "n3"), ("n3", "n1")):
            d = cl.make_workdir(rc, f"paced-{node}")
            jobs.append(cl.submit(job_script(
                f"echo 'srun: error: {other}: task 0: Exited with exit code 1'\n"
                f"echo '{XID}'\nexit 1"), "-w", node, workdir=d))
            wait_decision(audit, jobs[-1])
        assert_harmless(rc, audit)
        cancel(*jobs)
        # the real one: the driver's line in the kernel log while the job runs on n2
        job, d = _gated(rc, "n2")
        jobs.append(job)
        cl.wait_state(job, "RUNNING", 60, rc.root)
        kernel_xid(79)
        cl.write_user_file(d / "go", "")
        dec = wait_decision(audit, job)
        assert dec["trusted_suspects"] == ["n2"] and dec["backing"]["n2"].startswith(
            "kernel log of n2: NVRM: Xid (PCI:0000:3b:00): 79"), dec
        state, reason = node_reason("n2")
        assert "DRAIN" in state and reason == "gpualert: Xid 79 (fallen off the bus): reboot", \
            (state, reason)
        st = slurm.show_job(job)
        assert st.restarts == 1 and "n2" in slurm.expand_hostlist(st.raw["ExcNodeList"]), st.raw
        v = verdict_of(rc, job)
        assert v["trusted"]["nodes"]["n2"]["origin"] == "munge", v["trusted"]["nodes"]
        assert "kernel log of n2" in {e["provenance"]["label"] for e in v["verdict"]["evidence"]}
        assert "[kernel log of n2]" in gpualert("show", str(job), cfg=rc).stdout
    finally:
        cancel(*jobs)
        resume_node("n2")


def test_a_real_xid_in_monitor_mode_is_only_recommended(rc: cl.ClusterFacts,
                                                        audit: Path) -> None:
    write_config(rc, audit, mode="monitor")
    job, d = _gated(rc, "n3")
    try:
        cl.wait_state(job, "RUNNING", 60, rc.root)
        kernel_xid(48)
        cl.write_user_file(d / "go", "")
        dec = wait_decision(audit, job)
        assert dec["class"] == "gpu_hardware" and dec["planned"] == [], dec
        assert {(w["action"], w["target"]) for w in dec["would"]} == {
            ("drain_node", "n3"), ("requeue", str(job))}, dec
        assert drained_by_gpualert(rc) == [] and slurm.job_state(job).restarts == 0
    finally:
        cancel(job)


# ---- attack 7b: no job.json, no window since boot -----------------------------------------

def test_a_deleted_job_json_does_not_open_the_kernel_window(rc: cl.ClusterFacts,
                                                            audit: Path) -> None:
    write_config(rc, audit, mode="action")
    # a line from before the job (it matches what the node Epilog collects, no rule)
    write_kmsg("<6>gpualert-test: Killed process 1 (t1-probe) before the job")
    time.sleep(2 * 2 + 1)  # beyond the window's slack (2 s) before the job can start
    d = cl.make_workdir(rc, "attack7b")
    job = cl.submit(job_script(f'rm -f "{rc.spool}/$SLURM_JOB_ID/job.json"\nsleep 3\nexit 1'),
                    "-w", "n1", workdir=d)
    try:
        wait_decision(audit, job)
        assert not (rc.spool / str(job) / "job.json").exists()
        v = verdict_of(rc, job)
        kernel = v["nodes"]["n1"]["kernel"] or {}
        assert not any("t1-probe" in ln for ln in kernel.get("lines") or []), kernel
        rec = json.loads((rc.spool / str(job) / "nodes" / "n1.verdict.json").read_text())
        start = slurm.parse_time(slurm.show_job(job).raw.get("StartTime")) or 0
        assert rec["root_facts"]["window_source"] == "prolog", rec["root_facts"]
        assert abs(rec["root_facts"]["window"][0] - start) < 2, (rec["root_facts"], start)
        assert all(x["time"] >= start - 2 for x in rec["root_facts"]["kernel"]["lines"])
        assert_harmless(rc, audit)
    finally:
        cancel(job)


# ---- real node loss: a killed slurmd, a frozen node ----------------------------------------

@pytest.mark.parametrize("mode", ["action", "monitor"])
@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_a_lost_node_drains_and_requeues_in_action_mode_only(rc: cl.ClusterFacts, audit: Path,
                                                            how: str, mode: str) -> None:
    write_config(rc, audit, mode=mode)
    d = cl.make_workdir(rc, f"lost-{how}")
    job = cl.submit(job_script('srun -N2 -n2 bash -c \'touch "running-$SLURM_PROCID"; '
                               'exec sleep 300\''), "-N2", "--exclusive", workdir=d)
    victim, pid = "", 0
    try:
        cl.wait_until(lambda: all((d / f"running-{r}").exists() for r in (0, 1)), 120,
                      f"job {job} on two nodes", diagnose=lambda: cl.diagnostics(job, rc.root))
        info = slurm.show_job(job)
        victim = next(n for n in info.nodes if n != info.raw.get("BatchHost"))
        pid = int(rc.slurmd_pidfile(victim).read_text().strip())
        os.kill(pid, signal.SIGKILL if how == "killed" else signal.SIGSTOP)
        dec = wait_decision(audit, job, 0, timeout=150)
        assert dec["class"] == "node_failure" and dec["trusted_suspects"] == [victim], dec
        assert dec["backing"][victim].startswith(f"Slurm: {victim} "), dec
        v = verdict_of(rc, job)
        assert any(e["provenance"]["label"].startswith("Slurm: ")
                   for e in v["verdict"]["evidence"]), v["verdict"]["evidence"]
        reason = node_reason(victim)[1]
        if mode == "action":
            assert reason.startswith("gpualert: node_failure"), reason
            st = slurm.show_job(job)
            assert st.restarts == 1 and victim in slurm.expand_hostlist(
                st.raw["ExcNodeList"]), st.raw
        else:
            assert not reason.startswith("gpualert:"), reason
            assert dec["planned"] == [] and {(w["action"], w["target"]) for w in dec["would"]} \
                == {("drain_node", victim), ("requeue", str(job))}, dec
    finally:
        if how == "frozen" and pid:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)
        cancel(job)
        if victim:
            cl.restore_node(rc, victim)
