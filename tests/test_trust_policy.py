"""Provenance and the recovery policy on it, as pure logic (docs/SECURITY.md), and the MUNGE
seal against a real munged of the test's own (its own key and socket). The same attacks run as
the unprivileged user on the action-mode cluster in tests/test_trust_cluster.py."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpualert_slurm.classify.node_trust import node_trust
from gpualert_slurm.core import provenance
from gpualert_slurm.core.config import RecoveryConfig
from gpualert_slurm.core.evidence import filter_kernel_lines
from gpualert_slurm.recovery.audit import breaker_open
from gpualert_slurm.recovery.policy import JobFacts, decide, drains_in_window

NOW = 1_800_000_000.0
ACTION = RecoveryConfig(mode="action")
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus."


def verdict(cls: str = "gpu_hardware", root_node: str | None = "n2") -> dict[str, Any]:
    return {"verdict": {"class": cls, "root_node": root_node,
                        "evidence": [{"file": "/spool/1/tasks/batch.0.log", "line": 3,
                                      "text": XID}]}, "failed": True}


def facts(**kw: Any) -> JobFacts:
    base: dict[str, Any] = dict(job_id="10", attempt=0, partition="gpu", nodes=("n1", "n2"),
                                suspects=("n2",), partition_size=10, time=NOW, user="alice",
                                node_set=tuple(f"n{i}" for i in range(1, 11)))
    base.update(kw)
    return JobFacts(**base)


def planned(d: Any) -> list[tuple[str, str]]:
    return [(p["action"], p["target"]) for p in d.planned]


def refusals(d: Any, action: str = "drain_node") -> list[str]:
    return [n["why"] for n in d.not_taken if n["action"] == action]


# ---- job text alone -----------------------------------------------------------------------

def test_a_printed_xid_requeues_the_job_only_and_says_why_nothing_was_drained() -> None:
    why = "the Xid line was printed by the job, not found in n2's kernel log"
    d = decide(ACTION, verdict(), facts(refuted=(("n2", why),)), [])
    assert planned(d) == [("requeue", "10")]
    assert d.exclude == ["n2"]  # a node Slurm ran it on: the job's own business
    assert refusals(d) == [why] and d.trusted_suspects == [] and d.flagged_nodes == []
    assert not d.trip_breaker


def test_a_printed_node_slurm_did_not_run_the_job_on_is_neither_drained_nor_excluded() -> None:
    d = decide(ACTION, verdict(root_node="n3"), facts(nodes=("n1",), suspects=("n3",)), [])
    assert planned(d) == [("requeue", "10")] and d.exclude == []
    assert refusals(d) == ["Slurm did not run this attempt on n3 (it ran on n1)"]
    assert refusals(d, "exclude_node") == refusals(d)  # the job's own requeue keeps n3


def test_a_proven_node_outside_slurms_list_is_still_not_drained() -> None:
    # a proof about a node Slurm does not list for this attempt (a renamed record) is dropped
    d = decide(ACTION, verdict(root_node="n3"),
               facts(nodes=("n1",), suspects=("n3",), proven=(("n3", "kernel log of n3"),)), [])
    assert ("drain_node", "n3") not in planned(d)


def test_a_root_fact_drains_the_node_it_is_about_whatever_the_job_named() -> None:
    d = decide(ACTION, verdict(root_node="n1"),
               facts(suspects=("n1",), proven=(("n2", f"kernel log of n2: {XID}"),)), [])
    assert planned(d) == [("drain_node", "n2"), ("requeue", "10")]
    assert d.exclude == ["n2", "n1"] and d.backing == {"n2": f"kernel log of n2: {XID}"}
    assert any("n1" in w or "no fact" in w for w in refusals(d))


def test_node_failure_drains_only_what_slurm_says_failed() -> None:
    d = decide(ACTION, verdict("node_failure"),
               facts(refuted=(("n2", "Slurm does not say n2 failed (its state: IDLE)"),)), [])
    assert planned(d) == [("requeue", "10")]
    assert refusals(d) == ["Slurm does not say n2 failed (its state: IDLE)"]
    ok = decide(ACTION, verdict("node_failure"),
                facts(proven=(("n2", "Slurm: n2 DOWN+NOT_RESPONDING"),)), [])
    assert planned(ok) == [("drain_node", "n2"), ("requeue", "10")]


def test_monitor_mode_recommends_the_proven_drain_only() -> None:
    d = decide(RecoveryConfig(), verdict(), facts(proven=(("n2", "kernel log of n2"),)), [])
    assert d.planned == [] and ("drain_node", "n2") in [(p["action"], p["target"])
                                                         for p in d.would]
    job_only = decide(RecoveryConfig(), verdict(), facts(), [])
    assert [p["action"] for p in job_only.would] == ["requeue"]


# ---- statistics count proven nodes only ---------------------------------------------------

def test_escalation_and_blast_radius_count_only_proven_suspects() -> None:
    ev = "NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception"
    v = verdict("cuda_error")
    v["verdict"]["evidence"][0]["text"] = ev
    first = decide(ACTION, v, facts(), [])
    hist = [{"event": "decision", **first.to_json(), "suspects": ["n2"], "time": NOW - 100}]
    # a printed line the second time too: never escalated, whatever the first one claimed
    again = decide(ACTION, v, facts(job_id="11"), hist)
    assert not any(a == "drain_node" for a, _ in planned(again))
    proven = (("n2", "kernel log of n2: " + ev),)
    one = decide(ACTION, v, facts(proven=proven), [])
    hist = [{"event": "decision", **one.to_json(), "time": NOW - 100}]
    two = decide(ACTION, v, facts(job_id="11", proven=proven), hist)
    assert ("drain_node", "n2") in planned(two) and "escalated" in two.notes[0]
    # printed claims on many nodes do not make a blast radius that hides a real fault
    fake = [{"event": "decision", "id": f"{j}.0", "job": str(j), "signature": two.signature,
             "suspects": [n], "time": NOW - 60} for j, n in ((20, "n5"), (21, "n6"))]
    three = decide(ACTION, v, facts(job_id="12", proven=proven), hist + fake)
    assert ("drain_node", "n2") in planned(three)


def test_one_users_repeated_application_xid_does_not_escalate() -> None:
    ev = "NVRM: Xid (PCI:0000:3b:00): 31, pid=9, MMU Fault"
    v = verdict("cuda_error")
    v["verdict"]["evidence"][0]["text"] = ev
    proven = (("n2", "kernel log of n2: " + ev),)
    one = decide(ACTION, v, facts(proven=proven), [])
    hist = [{"event": "decision", **one.to_json(), "user": "alice", "time": NOW - 100}]
    again = decide(ACTION, v, facts(job_id="11", proven=proven), hist)
    assert not any(a == "drain_node" for a, _ in planned(again))
    assert "own jobs only" in again.notes[0]
    other = decide(ACTION, v, facts(job_id="12", user="bob", proven=proven), hist)
    assert ("drain_node", "n2") in planned(other) and "escalated" in other.notes[0]


# ---- the breaker counts state -------------------------------------------------------------

def _drain(node: str, t: float, did: str = "1.0", user: str = "bob") -> list[dict[str, Any]]:
    return [{"event": "decision", "id": did, "user": user, "partition": "gpu", "time": t},
            {"event": "result", "id": did, "action": "drain_node", "target": node,
             "outcome": "done", "partition": "gpu", "time": t},
            {"event": "outcome", "id": did, "outcome": "completed", "time": t}]


def test_nodes_still_drained_from_long_ago_count_for_the_breaker() -> None:
    proven = (("n2", "kernel log of n2"),)
    cfg = RecoveryConfig(mode="action", breaker_share=0.2, breaker_per_user=5)
    # share 0.2 of 10 nodes: 2 drains; n5 and n6 were drained a day ago and are still drained
    old = _drain("n5", NOW - 86400, "1.0") + _drain("n6", NOW - 86400, "2.0")
    d = decide(cfg, verdict(), facts(proven=proven, drained_now=("n5", "n6")), old)
    assert ("drain_node", "n2") not in planned(d) and d.trip_breaker
    assert "3 nodes of partition gpu drained by gpualert" in refusals(d)[0]
    # once an admin resumed them, the old drains no longer count
    d = decide(cfg, verdict(), facts(proven=proven, drained_now=()), old)
    assert ("drain_node", "n2") in planned(d)


def test_two_partition_names_over_the_same_nodes_share_one_allowance() -> None:
    hist = _drain("n5", NOW - 60, "1.0")
    assert drains_in_window(hist, "other-name", NOW - 600, ("n5", "n6")) == {"n5"}
    assert drains_in_window(hist, "other-name", NOW - 600) == set()
    rec = [{"event": "breaker", "partition": "gpu", "state": "open", "node_set": ["n6", "n5"]}]
    assert breaker_open(rec, "gpu-alias", ("n5", "n6")) is not None
    assert breaker_open(rec, "cpu", ("n7",)) is None
    reset = [*rec, {"event": "breaker", "partition": "gpu", "state": "reset"}]
    assert breaker_open(reset, "gpu-alias", ("n5", "n6")) is None


def test_a_partition_slurm_does_not_know_gets_no_allowance() -> None:
    d = decide(ACTION, verdict(), facts(partition="nosuch", node_set=(), partition_size=0,
                                        proven=(("n2", "kernel log of n2"),)), [])
    assert ("drain_node", "n2") not in planned(d) and not d.trip_breaker
    assert "not known to Slurm" in refusals(d)[0]


def test_the_per_user_cap_refuses_without_tripping_the_breaker() -> None:
    cfg = RecoveryConfig(mode="action", breaker_share=0.9, breaker_per_user=2)
    proven = (("n2", "kernel log of n2"),)
    hist = _drain("n5", NOW - 60, "1.0", "alice") + _drain("n6", NOW - 86400, "2.0", "alice")
    d = decide(cfg, verdict(), facts(proven=proven, drained_now=("n5", "n6")), hist)
    assert ("drain_node", "n2") not in planned(d) and not d.trip_breaker
    assert "per-user cap: 2 node(s) drained for alice's jobs" in refusals(d)[0]
    other = decide(cfg, verdict(), facts(user="carol", proven=proven, drained_now=("n5", "n6")),
                   hist)
    assert ("drain_node", "n2") in planned(other)


# ---- kernel lines -------------------------------------------------------------------------

def test_kernel_lines_with_a_name_holding_the_drivers_words_are_dropped() -> None:
    t = "2026-11-30T06:10:00,000000+00:00 "
    lines = [
        t + XID,
        t + "traps: x[812] trap invalid opcode ip:7f0 sp:7ffd error:0 in " + XID + "[7f0+1000]",
        t + "NVRM: x[812]: segfault at 0 ip 0 sp 0 error 4 in GPU has fallen off the bus[400+1]",
        t + "Out of memory: Killed process 812 (NVRM: Xid (PCI) total-vm:1kB",
        t + "python invoked oom-killer: gfp_mask=0x0",
    ]
    got = filter_kernel_lines(lines, NOW - 10**9, None)
    assert got == [lines[0], lines[4]]
    assert provenance.driver_xid(XID) == ("0000:3b:00", 79)
    assert provenance.driver_xid("x " + XID) is None


def test_without_slurms_start_no_kernel_line_is_read() -> None:
    from gpualert_slurm.core.evidence import kernel_evidence

    k = kernel_evidence(None, time.time())
    assert k["lines"] == [] and "start time from Slurm" in k["absent"]


def _record(job: str = "7", attempt: int = 0, node: str = "n2", when: float = NOW,
            pci: str = "0000:3b:00", gpus: list[str] | None = None) -> dict[str, Any]:
    line = f"NVRM: Xid (PCI:{pci}): 79, pid=1, GPU has fallen off the bus."
    k = {"source": "dmesg", "absent": None,
         "lines": [time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(when)) + ",000000+00:00 "
                   + line]}
    rf = provenance.node_facts(job, attempt, node, (when - 60, when + 1), "slurm", k,
                               {"changed": []}, gpus)
    return {"root_facts": rf, "seal": {"method": None, "why": "test"}}


def test_a_root_fact_backs_gpu_hardware_only_in_slurms_window_and_on_the_jobs_gpus() -> None:
    ok = provenance.Checked(True, "root-owned", None)
    rec = _record()
    assert provenance.may_back(rec) and provenance.has_facts(rec)
    n = node_trust(rec, ok, NOW - 30, NOW + 10)
    assert n["driver"][0]["classes"] == ["gpu_hardware"]
    tr = {"slurm": {"nodes": ["n2"]}, "nodes": {"n2": n}}
    assert provenance.backing(tr, "n2", "gpu_hardware").startswith("kernel log of n2: NVRM")
    late = node_trust(rec, ok, NOW + 60, NOW + 120)
    assert late["driver"][0]["ignored"] == "outside the job's window as Slurm gives it"
    assert provenance.backing({"nodes": {"n2": late}}, "n2", "gpu_hardware") is None
    other_gpu = node_trust(_record(gpus=["0000:af:00"]), ok, NOW - 30, NOW + 10)
    assert "is not one of the job's" in other_gpu["driver"][0]["ignored"]
    unverified = node_trust(rec, provenance.Checked(False, None, "x"), None, None)
    assert provenance.backing({"nodes": {"n2": unverified}}, "n2", "gpu_hardware") is None
    tr = {"slurm": {"nodes": ["n2"]}, "nodes": {"n2": {"verified": True, "driver": []}}}
    assert provenance.not_backed(tr, "n2", "gpu_hardware") == \
        "the Xid line was printed by the job, not found in n2's kernel log"
    # a node record with no kernel line at all (its seal is then not checked): the same
    tr["nodes"]["n2"] = {"verified": False, "empty": True, "driver": []}
    assert provenance.not_backed(tr, "n2", "gpu_hardware") == \
        "the Xid line was printed by the job, not found in n2's kernel log"
    tr["nodes"]["n2"] = {"verified": False, "why": "no seal", "driver": []}
    assert "could not be verified as root's (no seal)" in provenance.not_backed(
        tr, "n2", "gpu_hardware")


def test_evidence_lines_say_where_they_come_from() -> None:
    tr = {"slurm": {"state": "NODE_FAIL"},
          "nodes": {"n2": {"verified": True}, "n3": {"verified": False, "why": "no seal"}}}
    v = {"evidence": [{"file": "/s/tasks/batch.0.log", "text": XID},
                      {"file": "(kernel log)", "text": f"n2: 2026-11-30T06:10:00 {XID}"},
                      {"file": "(kernel log)", "text": f"n3: {XID}"},
                      {"file": "(slurm)", "text": "job state NODE_FAIL"}]}
    provenance.annotate(v, tr)
    got = [e["provenance"]["label"] for e in v["evidence"]]
    assert got[0] == "printed by the job" and got[1] == "kernel log of n2"
    assert got[2].startswith("n3's kernel log as its record says (not verified: no seal")
    assert got[3] == "Slurm: NODE_FAIL"
    assert [e["provenance"]["origin"] for e in v["evidence"]] == ["job", "root", "job", "slurm"]
    nv = {"file": "(nvml)", "text": "ecc_uncorrected_volatile 0 -> 2"}
    assert provenance.label(nv, tr)["origin"] == "job"
    tr["nodes"]["n2"]["nvml_changed"] = [{"gpu": 0, "counter": "ecc_uncorrected_volatile"}]
    assert provenance.label(nv, tr) == {"origin": "root", "node": "n2", "label": "NVML of n2"}


# ---- the record's origin ------------------------------------------------------------------

def test_a_root_owned_record_counts_only_for_the_run_it_names(tmp_path: Path) -> None:
    p = tmp_path / "n2.verdict.json"
    p.write_text(json.dumps(_record()))
    os.chmod(p, 0o644)
    st = os.stat(p)
    assert st.st_uid == 0  # the tests run as root
    rec = json.loads(p.read_text())
    assert provenance.verify(rec, st, "7", 0, "n2", None).origin == "root-owned"
    assert not provenance.verify(rec, st, "7", 0, "n2", None, root_owned_ok=False).verified
    renamed = provenance.verify(rec, st, "8", 0, "n2", None)
    assert not renamed.verified and "about job 7 attempt 0 on n2" in str(renamed.why)
    assert not provenance.verify(rec, st, "7", 1, "n2", None).verified
    assert not provenance.verify(rec, st, "7", 0, "n1", None).verified
    os.chown(p, pwd.getpwnam("gpatest").pw_uid, -1)
    assert not provenance.verify(rec, os.stat(p), "7", 0, "n2", None).verified
    os.chown(p, 0, -1)
    os.chmod(p, 0o666)
    assert not provenance.verify(rec, os.stat(p), "7", 0, "n2", None).verified


def test_munge_socket_is_the_one_slurm_uses(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n# AuthInfo=socket=/not/this\n"
                    "AuthInfo=cred_expire=120,socket=/run/x/munge.socket.2\n")
    assert provenance.munge_socket(None, {"SLURM_CONF": str(conf)}) == "/run/x/munge.socket.2"
    assert provenance.munge_socket("/etc/m.sock", {"SLURM_CONF": str(conf)}) == "/etc/m.sock"
    assert provenance.munge_socket(None, {"SLURM_CONF": str(tmp_path / "none")}) is None


@contextlib.contextmanager
def private_munged() -> Iterator[str]:
    """A munged of this test alone: its own key, socket, pid and log (as the munge user, in
    a directory it can reach: pytest's tmp_path is root's 0700)."""
    if not os.path.exists("/usr/sbin/munged"):
        pytest.fail("munged is not installed (the cluster's provisioning installs munge)")
    tmp = Path(tempfile.mkdtemp(prefix="gpualert-munge-", dir="/tmp"))
    d = tmp / "munge"
    d.mkdir()
    os.chmod(d, 0o755)  # every user reaches the socket (as on a Slurm node)
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    shutil.chown(d, "munge", "munge")
    shutil.chown(key, "munge", "munge")
    os.chmod(tmp, 0o755)
    sock = d / "sock"
    subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged", f"--key-file={key}",
                    f"--socket={sock}", f"--pid-file={d / 'pid'}", f"--log-file={d / 'log'}",
                    f"--seed-file={d / 'seed'}", "--num-threads=1"], check=True, timeout=20)
    try:
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        yield str(sock)
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int((d / "pid").read_text()), 15)
        shutil.rmtree(tmp, ignore_errors=True)


def test_the_munge_seal_checks_root_and_the_facts() -> None:
    with private_munged() as sock:
        rec = _record()
        rec["seal"] = provenance.seal(rec["root_facts"], sock)
        assert rec["seal"]["method"] == "munge", rec["seal"]
        ok = provenance.verify(json.loads(json.dumps(rec)), None, "7", 0, "n2", sock)
        assert ok.verified and ok.origin == "munge", ok
        # decoded once: MUNGE refuses the same credential again (a replay)
        again = provenance.verify(rec, None, "7", 0, "n2", sock)
        assert not again.verified and "seal does not check" in str(again.why)
        # the facts changed after sealing
        forged = _record()
        forged["seal"] = provenance.seal(forged["root_facts"], sock)
        forged["root_facts"]["kernel"]["lines"][0]["xid"] = 48
        bad = provenance.verify(forged, None, "7", 0, "n2", sock)
        assert not bad.verified and "other facts" in str(bad.why)
        # a credential the job's user made over the very same facts
        mine = _record()
        p = subprocess.run(["runuser", "-u", "gpatest", "--", "munge", "-S", sock, "-s",
                            provenance.seal_payload(mine["root_facts"])],
                           capture_output=True, text=True, timeout=10, check=True)
        mine["seal"] = {"method": "munge", "credential": p.stdout.strip()}
        user = provenance.verify(mine, None, "7", 0, "n2", sock)
        assert not user.verified and "uid 1001" in str(user.why), user
        # root's credential for this run cannot be decoded by the user (-u 0)
        theirs = _record()
        theirs["seal"] = provenance.seal(theirs["root_facts"], sock)
        p = subprocess.run(["runuser", "-u", "gpatest", "--", "unmunge", "-S", sock],
                           input=theirs["seal"]["credential"], capture_output=True, text=True,
                           timeout=10)
        assert p.returncode != 0 and "Unauthorized" in p.stderr, p.stderr
        assert provenance.verify(theirs, None, "7", 0, "n2", sock).verified


def test_the_prologs_nvml_before_counts_only_for_this_run() -> None:
    from gpualert_slurm.hooks.node_epilog import prolog_record_of_this_run as ok

    rec = {"node": "n2", "restart_count": 0, "time": NOW, "slurm_env": {"SLURM_JOB_ID": "7"}}
    assert ok(rec, "n2", 0, NOW - 1, NOW + 60, "7")
    assert not ok(rec, "n2", 0, NOW - 1, NOW + 60, "8")  # another job's, renamed in
    assert not ok(rec, "n1", 0, NOW - 1, NOW + 60, "7")
    assert not ok(rec, "n2", 1, NOW - 1, NOW + 60, "7")
    assert not ok(rec, "n2", 0, NOW + 400, NOW + 600, "7")  # long before this run
    assert not ok(rec, "n2", 0, None, NOW + 60, "7")


def test_a_kmsg_others_can_write_makes_no_driver_line_count(tmp_path: Path) -> None:
    k = tmp_path / "kmsg"
    k.write_text("")
    os.chmod(k, 0o644)
    assert provenance.kmsg_writable(str(k)) is None
    os.chmod(k, 0o666)
    assert "writable by others than root" in str(provenance.kmsg_writable(str(k)))
    rec = _record()
    rec["root_facts"]["kmsg_writable"] = provenance.kmsg_writable(str(k))
    n = node_trust(rec, provenance.Checked(True, "munge", None), NOW - 30, NOW + 10)
    assert "writable by others" in n["driver"][0]["ignored"]
    assert provenance.backing({"nodes": {"n2": n}}, "n2", "gpu_hardware") is None
