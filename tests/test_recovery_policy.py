"""The recovery policy, audit log and attribution command as pure logic (no cluster)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from gpualert_slurm.core.config import ConfigError, RecoveryConfig, check_rule_names, parse_config
from gpualert_slurm.core.verdict import VerdictRecord
from gpualert_slurm.recovery import checkpoint_newest
from gpualert_slurm.recovery.actions import drain_reason, merged_exclusion
from gpualert_slurm.recovery.attribution import attribute
from gpualert_slurm.recovery.audit import AuditLog, breaker_open, decision_state, open_breakers
from gpualert_slurm.recovery.policy import JobFacts, decide, signature

NOW = 1_800_000_000.0


def verdict(cls: str, evidence: str = "", root_node: str | None = "n2",
            domain: str | None = None) -> dict[str, Any]:
    v: dict[str, Any] = {"class": cls, "evidence": [{"file": "x", "line": 1, "text": evidence}]
                         if evidence else [], "root_node": root_node}
    if domain:
        v["domain"] = domain
    return {"verdict": v, "failed": True}


def facts(**kw: Any) -> JobFacts:
    """A run Slurm ran on n1-n3; by default the blamed node is backed by a root fact (a real
    failure), as on_verdict finds it (`proven`); pass proven=() for a claim the job made."""
    base: dict[str, Any] = dict(job_id="10", attempt=0, partition="debug",
                                nodes=("n1", "n2", "n3"), suspects=("n2",), partition_size=10,
                                time=NOW)
    base.update(kw)
    if "proven" not in kw:
        base["proven"] = tuple((n, f"kernel log of {n}: NVRM: Xid") for n in base["suspects"])
    return JobFacts(**base)


ACTION = RecoveryConfig(mode="action")


def planned(d: Any) -> list[tuple[str, str]]:
    return [(p["action"], p["target"]) for p in d.planned]


def test_gpu_hardware_drains_and_requeues_excluding_the_node() -> None:
    d = decide(ACTION, verdict("gpu_hardware", "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234"),
               facts(), [])
    assert planned(d) == [("drain_node", "n2"), ("requeue", "10")]
    assert d.exclude == ["n2"] and d.rule == "gpu_hardware" and d.acts


def test_monitor_mode_records_what_would_be_done_and_does_nothing() -> None:
    d = decide(RecoveryConfig(), verdict("node_failure"), facts(), [])
    assert d.planned == [] and not d.acts
    assert [(p["action"], p["target"]) for p in d.would] == [("drain_node", "n2"),
                                                             ("requeue", "10")]
    assert all(n["why"] == "monitor mode" for n in d.not_taken)


def test_partition_override_of_the_mode() -> None:
    cfg = RecoveryConfig(mode="monitor", partitions=(("gpu", "action"),))
    assert decide(cfg, verdict("nccl_error"), facts(partition="gpu"), []).acts
    assert not decide(cfg, verdict("nccl_error"), facts(partition="debug"), []).acts


@pytest.mark.parametrize("cls", ["python_exception", "cuda_oom", "import_error", "nan_divergence"])
def test_workload_classes_are_never_retried(cls: str) -> None:
    d = decide(ACTION, verdict(cls), facts(), [])
    assert d.planned == [] and d.recommended == [] and d.rule == "domain:workload"


def test_nccl_is_requeued_once_only() -> None:
    first = decide(ACTION, verdict("nccl_error", "NCCL WARN net"), facts(), [])
    assert planned(first) == [("requeue", "10")]
    hist = [{"event": "decision", **first.to_json(), "time": NOW}]
    again = decide(ACTION, verdict("nccl_error", "NCCL WARN net"), facts(attempt=1), hist)
    assert again.planned == [] and "allows 1 requeue" in again.notes[-1]


def test_retry_budget_stops_a_job_failing_the_same_way() -> None:
    cfg = RecoveryConfig(mode="action", max_retries=2)
    one = decide(cfg, verdict("gpu_hardware"), facts(attempt=1), [])
    assert one.planned and one.retries_left == 0  # this requeue was the last one
    assert decide(cfg, verdict("gpu_hardware"), facts(attempt=0), []).retries_left == 1
    assert decide(RecoveryConfig(), verdict("gpu_hardware"), facts(), []).retries_left == 1
    assert decide(cfg, verdict("python_exception"), facts(), []).retries_left == 2
    d = decide(cfg, verdict("gpu_hardware"), facts(attempt=2), [])
    assert ("requeue", "10") not in planned(d)
    assert "retry budget spent: 2 of 2" in d.notes[-1]
    assert d.retries_left == 0


def test_same_cause_limit() -> None:
    cfg = RecoveryConfig(mode="action", max_retries=4, same_cause_limit=1,
                         rules=(("storage_io", {"retries": 4}),))
    hist = [{"event": "decision", "id": "10.0", "job": "10", "attempt": 0,
             "signature": signature(verdict("storage_io", "EIO on /scratch")), "time": NOW}]
    d = decide(cfg, verdict("storage_io", "EIO on /scratch"), facts(attempt=1), hist)
    assert not d.planned and "same cause ended 2 attempts" in d.notes[-1]


def test_checkpoint_progress_gates_the_requeue() -> None:
    hist = [{"event": "decision", "id": "10.0", "job": "10", "attempt": 0, "time": NOW,
             "signature": "x", "checkpoint_newest": 100.0}]
    cfg = RecoveryConfig(mode="action", rules=(("nccl_error", {"retries": 2}),))
    same = decide(cfg, verdict("nccl_error"), facts(attempt=1, checkpoint="ck/*.pt",
                                                    checkpoint_newest=100.0), hist)
    assert not same.planned and "no checkpoint progress" in same.notes[-1]
    newer = decide(cfg, verdict("nccl_error"), facts(attempt=1, checkpoint="ck/*.pt",
                                                     checkpoint_newest=160.0), hist)
    assert planned(newer) == [("requeue", "10")]
    none = decide(cfg, verdict("nccl_error"), facts(attempt=1, checkpoint="ck/*.pt"), hist)
    assert not none.planned


def test_user_opt_out_and_shadow_rules() -> None:
    d = decide(ACTION, verdict("node_failure"), facts(recover=False), [])
    assert not d.planned and "recover=off" in d.not_taken[0]["why"]
    cfg = RecoveryConfig(mode="action", rules=(("node_failure", {"shadow": True}),))
    s = decide(cfg, verdict("node_failure"), facts(), [])
    assert not s.planned and s.shadow and "shadow mode" in s.not_taken[0]["why"]
    # another rule still acts while node_failure is in shadow
    assert decide(cfg, verdict("nccl_error"), facts(), []).acts


def test_whitelist_limits_the_actions() -> None:
    cfg = RecoveryConfig(mode="action", actions=("requeue",))
    d = decide(cfg, verdict("gpu_hardware"), facts(), [])
    assert planned(d) == [("requeue", "10")] and d.exclude == []
    whys = {n["action"]: n["why"] for n in d.not_taken}
    assert "not in recovery.actions" in whys["drain_node"]
    assert "not in recovery.actions" in whys["exclude_node"]


def test_hold_rule_requeues_held() -> None:
    cfg = RecoveryConfig(mode="action", rules=(("hang", {"do": ["requeue", "hold"],
                                                         "retries": 1}),))
    d = decide(cfg, verdict("hang"), facts(), [])
    assert d.planned == [{"action": "requeue", "target": "10", "hold": True}]


def _drain_result(node: str, t: float, partition: str = "debug") -> dict[str, Any]:
    return {"event": "result", "action": "drain_node", "target": node, "outcome": "done",
            "partition": partition, "time": t}


def test_breaker_trips_on_a_burst_of_drains() -> None:
    cfg = RecoveryConfig(mode="action", breaker_share=0.2, breaker_window_s=600)
    # 10 nodes, 20 %: two drains allowed in the window, the third trips the breaker
    hist = [_drain_result("n7", NOW - 60), _drain_result("n8", NOW - 30)]
    d = decide(cfg, verdict("gpu_hardware"), facts(), hist)
    assert d.trip_breaker and ("drain_node", "n2") not in planned(d)
    assert ("requeue", "10") in planned(d)  # the job still gets its retry
    assert any("circuit breaker trips" in n["why"] for n in d.not_taken)
    # drains outside the window do not count
    old = [_drain_result("n7", NOW - 700), _drain_result("n8", NOW - 650)]
    assert ("drain_node", "n2") in planned(decide(cfg, verdict("gpu_hardware"), facts(), old))
    # an open breaker refuses every drain until reset
    shut = decide(cfg, verdict("gpu_hardware"), facts(breaker_open=True), [])
    assert not any(a == "drain_node" for a, _ in planned(shut))
    assert any("gpualert resume --breaker" in n["why"] for n in shut.not_taken)


def test_breaker_allows_one_drain_on_a_small_partition() -> None:
    d = decide(ACTION, verdict("node_failure"), facts(partition_size=3), [])
    assert ("drain_node", "n2") in planned(d)
    d2 = decide(ACTION, verdict("node_failure"), facts(partition_size=3, suspects=("n3",)),
                [_drain_result("n2", NOW - 5)])
    assert d2.trip_breaker and not any(a == "drain_node" for a, _ in planned(d2))


def test_escalation_same_signature_same_node_drains() -> None:
    ev = "CUDA error: an illegal memory access was encountered"
    first = decide(ACTION, verdict("cuda_error", ev), facts(), [])
    assert not any(a == "drain_node" for a, _ in planned(first))
    hist = [{"event": "decision", **first.to_json(), "suspects": ["n2"], "time": NOW - 100}]
    again = decide(ACTION, verdict("cuda_error", ev), facts(job_id="11"), hist)
    assert ("drain_node", "n2") in planned(again) and "escalated" in again.notes[0]


def test_blast_radius_same_signature_on_many_nodes_drains_nothing() -> None:
    ev = "NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception"
    hist = [{"event": "decision", "id": f"{j}.0", "job": str(j), "signature":
             signature(verdict("gpu_hardware", ev)), "trusted_suspects": [n], "time": NOW - 60}
            for j, n in ((20, "n5"), (21, "n6"))]
    d = decide(ACTION, verdict("gpu_hardware", ev), facts(), hist)
    assert not any(a == "drain_node" for a, _ in planned(d)) and d.exclude == []
    assert ("requeue", "10") in planned(d)
    assert any("blast radius" in n["why"] for n in d.not_taken)


def test_node_drained_often_is_flagged() -> None:
    cfg = RecoveryConfig(mode="action", flag_drains=2, breaker_share=1.0)
    d = decide(cfg, verdict("gpu_hardware"), facts(), [_drain_result("n2", NOW - 3600)])
    assert d.flagged_nodes == ["n2"]


def test_signature_ignores_volatile_parts() -> None:
    a = signature(verdict("gpu_hardware", "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, 0xdead"))
    b = signature(verdict("gpu_hardware", "NVRM: Xid (PCI:0000:3b:00): 79, pid=98, 0xbeef"))
    c = signature(verdict("gpu_hardware", "NVRM: Xid (PCI:0000:3b:00): 48, pid=98, 0xbeef"))
    assert a == b != c


def test_config_recovery_section() -> None:
    cfg = parse_config({"recovery": {
        "mode": "monitor", "partitions": {"gpu": "action"}, "max_retries": 3,
        "rules": {"hang": {"do": ["cancel"], "shadow": True}, "domain:workload": {"do": []}},
        "breaker": {"share": 0.5, "window": "5m"},
        "attribution": {"command": "/bin/cat -", "timeout_s": 2}}}, "x.yaml").recovery
    assert cfg.mode_for("gpu") == "action" and cfg.mode_for("debug") == "monitor"
    assert cfg.breaker_share == 0.5 and cfg.breaker_window_s == 300
    assert cfg.attribution == ("/bin/cat", "-") and cfg.max_retries == 3
    assert dict(cfg.rules)["hang"] == {"do": ["cancel"], "shadow": True}
    assert check_rule_names(cfg) == []
    assert check_rule_names(RecoveryConfig(rules=(("no_such_class", {}),))) == ["no_such_class"]


@pytest.mark.parametrize(("doc", "msg"), [
    ({"max_retries": 5}, "MaxBatchRequeue"),
    ({"rules": {"hang": {"do": ["reboot"]}}}, "recovery.rules.hang.do"),
    ({"rules": {"hang": {"retries": 9}}}, "recovery.rules.hang.retries"),
    ({"rules": {"Hang!": {}}}, "recovery.rules"),
    ({"partitions": {"gpu": "yolo"}}, "recovery.partitions"),
    ({"breaker": {"share": 2}}, "recovery.breaker.share"),
    ({"attribution": {"command": "relative/cmd"}}, "absolute path"),
    ({"frobnicate": 1}, "unknown key recovery.frobnicate"),
    ({"rules": {"gpu_hardwre": {"do": []}}}, "recovery.rules.gpu_hardwre: expected a failure"),
    ({"rules": {"domain:hardware": {}}}, "domain:workload"),
])
def test_config_recovery_errors(doc: dict[str, Any], msg: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config({"recovery": doc}, "x.yaml")
    assert msg in str(e.value)


# ---- audit log ------------------------------------------------------------------------------

def test_audit_log_appends_fsynced_lines_root_only(tmp_path: Path) -> None:
    log = AuditLog(str(tmp_path / "r" / "audit.jsonl"))
    log.append({"event": "decision", "id": "5.0", "job": "5", "attempt": 0})
    log.append({"event": "result", "id": "5.0", "action": "requeue", "target": "5",
                "outcome": "done"})
    with open(log.path, "a") as f:
        f.write('{"torn": \n')  # a torn line never breaks reading
    log.append({"event": "outcome", "id": "5.0", "outcome": "completed"})
    recs = log.read()
    assert [r.get("event") for r in recs] == ["decision", "result", "outcome"]
    assert stat.S_IMODE(os.stat(log.path).st_mode) == 0o600
    dec, done, outcome = decision_state(recs, "5.0")
    assert dec and dec["job"] == "5" and done == {("requeue", "5"): "done"}
    assert outcome == "completed"
    assert decision_state(recs, "6.0") == (None, {}, None)


def test_audit_lock_times_out_rather_than_waiting(tmp_path: Path) -> None:
    log = AuditLog(str(tmp_path / "audit.jsonl"))
    with log.locked(1) as a:
        assert a
        t = time.monotonic()
        with log.locked(0.3) as b:
            assert not b
        assert time.monotonic() - t < 1.5


def test_breaker_state_from_the_log() -> None:
    recs = [{"event": "breaker", "partition": "debug", "state": "open"}]
    assert breaker_open(recs, "debug") and not breaker_open(recs, "gpu")
    assert list(open_breakers(recs)) == ["debug"]
    recs.append({"event": "breaker", "partition": "debug", "state": "reset"})
    assert breaker_open(recs, "debug") is None and open_breakers(recs) == {}


def test_drain_reason_and_exclusion_merge() -> None:
    r = drain_reason("gpu_hardware", 'NVRM: Xid 79 "fell off"\n the bus')
    assert r.startswith("gpualert: gpu_hardware NVRM: Xid 79") and '"' not in r and "\n" not in r
    assert merged_exclusion("n[1-2]", ["n3", "n1"]) == "n1,n2,n3"
    assert merged_exclusion("(null)", ["n3"]) == "n3"


def test_checkpoint_newest(tmp_path: Path) -> None:
    (tmp_path / "ck").mkdir()
    for i, t in enumerate((100, 300, 200)):
        p = tmp_path / "ck" / f"step{i}.pt"
        p.write_text("x")
        os.utime(p, (t, t))
    assert checkpoint_newest("ck/*.pt", str(tmp_path), time.monotonic() + 5) == 300
    assert checkpoint_newest("ck/*.bin", str(tmp_path), time.monotonic() + 5) is None
    assert checkpoint_newest(None, str(tmp_path), time.monotonic() + 5) is None


# ---- attribution command (real processes) ---------------------------------------------------

def _script(tmp_path: Path, body: str) -> tuple[str, ...]:
    p = tmp_path / "attr.sh"
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(0o755)
    return (str(p),)


V = VerdictRecord.of({"job_id": "7", "verdict": {"class": "nccl_error", "domain": "infrastructure",
                                           "root_node": "n1"}})


@pytest.mark.parametrize(("body", "status"), [
    ("sleep 30\n", "timeout"),
    ("exit 3\n", "failed"),
    ("kill -SEGV $$\n", "failed"),
    ("echo 'not json'\n", "garbage"),
    ('echo \'{"verdict": {"class": "no_such_class"}}\'\n', "garbage"),
    ("echo '[1,2]'\n", "garbage"),
    # a known class with a field of the wrong type: checked as verdict.json's "verdict" is
    ('echo \'{"verdict": {"class": "gpu_hardware", "root_rank": "one"}}\'\n', "garbage"),
    ('echo \'{"verdict": {"class": "gpu_hardware", "evidence": [7]}}\'\n', "garbage"),
])
def test_attribution_failures_leave_the_verdict(tmp_path: Path, body: str, status: str) -> None:
    t = time.monotonic()
    out, info = attribute(_script(tmp_path, body), V, timeout_s=1.0)
    assert out == V and info["status"] == status
    assert time.monotonic() - t < 5  # a hanging command (and its children) is killed in time


def test_attribution_amends(tmp_path: Path) -> None:
    body = ("python3 -c 'import json,sys; v=json.load(sys.stdin); "
            "v[\"verdict\"][\"class\"]=\"gpu_hardware\"; v[\"verdict\"][\"root_node\"]=\"n3\"; "
            "print(json.dumps(v))'\n")
    out, info = attribute(_script(tmp_path, body), V, timeout_s=5)
    assert info["status"] == "amended"
    assert out.cause.cls == "gpu_hardware" and out.cause.root_node == "n3"
    assert out.cause.domain == "infrastructure"
    same, info2 = attribute(("/bin/cat",), V, timeout_s=5)
    assert info2["status"] == "confirmed" and same == V


def test_no_escalation_for_network_errors() -> None:
    """An NCCL error names the root rank's node, not a faulty one: never escalated to a drain."""
    ev = "NCCL WARN NET/IB : Got completion from peer with error 12"
    first = decide(ACTION, verdict("nccl_error", ev), facts(), [])
    hist = [{"event": "decision", **first.to_json(), "suspects": ["n2"], "time": NOW - 100}]
    again = decide(ACTION, verdict("nccl_error", ev), facts(job_id="11"), hist)
    assert not any(a == "drain_node" for a, _ in planned(again))


# ---- hang detection (gpualert watch) --------------------------------------------------------

def test_judge_hung_straggler_and_batch_waiting_on_srun() -> None:
    from gpualert_slurm.recovery.watch import judge

    def b(**silence: float) -> dict[str, dict[str, Any]]:
        return {k[1:].replace("_", "."): {"silence_s": s, "file": k} for k, s in silence.items()}

    assert judge(b(s0_0=100, s0_1=95), 60) == ("hung", ["0.0", "0.1"])
    assert judge(b(s0_0=2, s0_1=95), 60) == ("straggler", ["0.1"])
    assert judge(b(s0_0=2, s0_1=3), 60) == (None, [])
    # the batch script waits on srun silently: not a straggler, and not counted as hung
    beats = {"batch.0": {"silence_s": 500, "file": "b"}, **b(s0_0=1)}
    assert judge(beats, 60) == (None, [])
    assert judge({"batch.0": {"silence_s": 500, "file": "b"}}, 60) == ("hung", ["batch.0"])
    assert judge({}, 60) == (None, [])


def test_heartbeats_from_log_mtimes(tmp_path: Path) -> None:
    from gpualert_slurm.recovery.watch import heartbeats

    tasks = tmp_path / "7" / "attempt-1" / "tasks"
    tasks.mkdir(parents=True)
    (tmp_path / "7" / "tasks").mkdir()
    for d in (tmp_path / "7", tmp_path / "7" / "attempt-1"):
        d.chmod(0o700)  # a job's dirs as the Prolog makes them: any other is refused
    for name, age in (("0.0.log", 5), ("0.1.log", 120), ("0.2.log", 300)):
        p = tasks / name
        p.write_text("x\n")
        os.utime(p, (time.time() - age, time.time() - age))
    (tasks / "0.2.exit").write_text("{}")  # ended: not silent, gone
    att, beats = heartbeats(str(tmp_path), "7", time.time() - 1000)
    assert att == 1 and sorted(beats) == ["0.0", "0.1"]
    assert 4 <= beats["0.0"]["silence_s"] < 10 and 119 <= beats["0.1"]["silence_s"] < 130


def test_report_lines_say_what_was_and_would_be_done() -> None:
    from gpualert_slurm.report.recovery_lines import report_lines

    done = report_lines({"taken": [{"action": "drain_node", "target": "n2", "outcome": "done"},
                                   {"action": "requeue", "target": "9", "outcome": "done"}],
                         "planned": [{"action": "requeue", "target": "9"}],
                         "not_taken": [], "retries_left": 1})
    assert done == ["gpualert drained node n2: done.", "gpualert requeued the job: done.",
                    "Retries left for this job: 1."]
    would = report_lines({"taken": [], "would": [{"action": "drain_node", "target": "n2"}],
                          "not_taken": [{"action": "drain_node", "target": "n2",
                                         "why": "monitor mode"}], "retries_left": 2})
    assert would[0] == "In action mode gpualert would drain node n2."
    assert "Nothing was done: monitor mode." in would
    assert report_lines(None) == []


def test_watch_makes_late_the_decision_a_busy_lock_left_undone(tmp_path: Path) -> None:
    import json as _json

    from gpualert_slurm.core.config import Config
    from gpualert_slurm.recovery import resume_unfinished

    spool = tmp_path / "spool"
    (spool / "41").mkdir(parents=True)
    v = {"job_id": "41", "attempt": 0, "failed": True,
         "job": {"nodes": ["n1"], "partition": "", "user": "u", "end_time": time.time()},
         "options": {}, "verdict": {"class": "python_exception", "root_node": "n1",
                                    "evidence": [{"file": "x", "text": "ValueError: 1"}]}}
    (spool / "41" / "verdict.json").write_text(_json.dumps(v))
    audit = AuditLog(str(tmp_path / "audit.jsonl"))
    audit.append({"event": "outcome", "id": "41.0", "job": "41", "attempt": 0,
                  "outcome": "abandoned", "why": "the audit lock did not come within the bound"})
    cfg = Config(spool=str(spool), recovery=RecoveryConfig(timeout_s=1, audit_log=audit.path))
    assert len(resume_unfinished(cfg, min_age_s=0)) == 1
    recs = audit.read()
    dec = [r for r in recs if r["event"] == "decision"]
    assert len(dec) == 1 and dec[0]["class"] == "python_exception"
    assert recs[-1]["event"] == "outcome" and recs[-1]["outcome"] == "recorded"
    assert resume_unfinished(cfg, min_age_s=0) == []  # made once
