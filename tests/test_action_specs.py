"""The recovery actions as one table (core/vocab.py's ACTION_SPECS): the config's whitelist,
the policy, the executors, the report's sentences and the docs all read it, and agree."""

from __future__ import annotations

import json
import re
from dataclasses import FrozenInstanceError
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpualert_slurm.core import vocab
from gpualert_slurm.core.classes import shipped_classes
from gpualert_slurm.core.config import ConfigError, RecoveryConfig, parse_config
from gpualert_slurm.core.vocab import ACTION_SPECS, Action, Mode, Need, spec_of
from gpualert_slurm.recovery.actions import EXECUTORS, execute
from gpualert_slurm.recovery.policy import JobFacts, builtin_policy, decide
from gpualert_slurm.report.recovery_lines import report_lines

ROOT = Path(__file__).resolve().parent.parent


def test_every_action_has_one_frozen_row_and_the_names_are_the_enum() -> None:
    assert list(ACTION_SPECS) == list(Action)
    for name, spec in ACTION_SPECS.items():
        assert spec.name is name
        assert spec.target in ("node", "job")
        assert isinstance(spec.needs, Need)
    with pytest.raises(FrozenInstanceError):
        ACTION_SPECS[Action.CANCEL].breaker = True  # type: ignore[misc]


def test_the_rows_say_what_security_md_section_3_says() -> None:
    drain, excl = ACTION_SPECS[Action.DRAIN_NODE], ACTION_SPECS[Action.EXCLUDE_NODE]
    assert (drain.target, drain.needs, drain.breaker) == ("node", Need.PROVEN, True)
    assert (excl.target, excl.needs, excl.breaker) == ("node", Need.RAN, False)
    assert [a for a, s in ACTION_SPECS.items() if s.breaker] == [Action.DRAIN_NODE]
    for a in (Action.REQUEUE, Action.HOLD, Action.CANCEL):
        assert ACTION_SPECS[a].needs is Need.JOB and ACTION_SPECS[a].target == "job"
    assert vocab.REQUEUE_FAMILY == ("requeue", "exclude_node", "hold")
    assert vocab.NODE_ACTIONS == ("drain_node", "exclude_node")


def test_an_executor_for_each_action_not_carried_by_another() -> None:
    own = {a for a, s in ACTION_SPECS.items() if s.carried_by is None}
    assert own == set(EXECUTORS) == {Action.DRAIN_NODE, Action.REQUEUE, Action.CANCEL}
    for a, s in ACTION_SPECS.items():
        if s.carried_by is not None:
            assert s.carried_by in EXECUTORS, a


def test_spec_of_names_a_row_or_none() -> None:
    """hold is carried by the requeue; names outside the table (old records, a typo in a
    site's rule) have no row."""
    hold = spec_of("hold")
    assert hold is not None and hold.carried_by is Action.REQUEUE
    assert spec_of("no_such_action") is None and spec_of(None) is None


def test_the_config_whitelist_is_the_table() -> None:
    assert RecoveryConfig().actions == vocab.DEFAULT_ACTIONS
    assert "cancel" not in RecoveryConfig().actions
    assert set(vocab.DEFAULT_ACTIONS) == {a for a, s in ACTION_SPECS.items() if s.default_allowed}
    cfg = parse_config({"recovery": {"actions": list(vocab.ACTION_NAMES),
                                     "rules": {"hang": {"do": ["cancel"]}}}}, "/x.yaml")
    assert cfg.recovery.actions == vocab.ACTION_NAMES
    with pytest.raises(ConfigError, match=re.escape(
            "recovery.actions: expected a list of requeue, exclude_node, drain_node, hold, "
            "cancel, got ['reboot']")):
        parse_config({"recovery": {"actions": ["reboot"]}}, "/x.yaml")
    with pytest.raises(ConfigError, match=r"recovery\.rules\.hang\.do: expected a list of"):
        parse_config({"recovery": {"rules": {"hang": {"do": ["reboot"]}}}}, "/x.yaml")


def test_the_modes_are_the_enum() -> None:
    assert vocab.MODES == ("monitor", "action")
    cfg = parse_config({"recovery": {"mode": "action", "partitions": {"gpu": "monitor"}}},
                       "/x.yaml")
    assert cfg.recovery.mode is Mode.ACTION and cfg.recovery.mode_for("gpu") is Mode.MONITOR
    assert json.dumps({"mode": cfg.recovery.mode}) == '{"mode": "action"}'
    with pytest.raises(ConfigError, match="recovery.mode: expected monitor or action"):
        parse_config({"recovery": {"mode": "dry-run"}}, "/x.yaml")


def test_the_shipped_rules_name_only_actions_of_the_table() -> None:
    rules = builtin_policy()["rules"]
    for name, rule in rules.items():
        for a in rule.get("do") or ():
            assert spec_of(a) is not None, (name, a)


def test_docs_name_every_action() -> None:
    text = (ROOT / "docs" / "RECOVERY.md").read_text()
    for a in vocab.ACTION_NAMES:
        assert a in text, a
    shipped = (ROOT / "gpualert_slurm" / "recovery" / "policy.yaml").read_text()
    assert "(drain_node, requeue, exclude_node, hold, cancel)" in shipped
    assert set(re.search(r"\((drain_node[^)]*)\)", shipped).group(1).split(", ")) \
        == set(vocab.ACTION_NAMES)


def test_the_report_says_each_action_in_its_rows_words() -> None:
    summary = {"outcome": "completed", "rule": "gpu_hardware",
               "planned": [{"action": "drain_node", "target": "n2"},
                           {"action": "requeue", "target": "10", "hold": True}],
               "taken": [{"action": "check", "target": "10", "outcome": "done"},
                         {"action": "drain_node", "target": "n2", "outcome": "done"},
                         {"action": "requeue", "target": "10", "outcome": "done"},
                         {"action": "cancel", "target": "10", "outcome": "failed"},
                         {"action": "hold", "target": "10", "outcome": "failed"}]}
    assert report_lines(summary) == [
        "gpualert checked the job: done.",
        "gpualert drained node n2: done.",
        "gpualert requeued the job (held): done.",
        "gpualert cancelled the job: failed.",
        "gpualert hold: failed."]
    planned = {**summary, "outcome": "planned", "taken": [],
               "planned": [{"action": "drain_node", "target": "n2"},
                           {"action": "requeue", "target": "10"},
                           {"action": "cancel", "target": "10"},
                           {"action": "exclude_node", "target": "n2"}]}
    assert report_lines(planned) == [
        "gpualert drains node n2 now (right after this report).",
        "gpualert requeues the job now (right after this report).",
        "gpualert cancels the job now (right after this report).",
        "gpualert does exclude_node n2 now (right after this report)."]
    would = {"outcome": "recorded", "rule": "gpu_hardware",
             "would": [{"action": "drain_node", "target": "n2"}],
             "not_taken": [{"action": "drain_node", "target": "n2", "why": "monitor mode"},
                           {"action": "exclude_node", "target": "n9", "why": "no fact",
                            "provenance": True}]}
    assert report_lines(would) == [
        "In action mode gpualert would drain node n2.",
        "Not acted on: exclude node n9: no fact.",
        "Nothing was done: monitor mode."]


def _facts(**kw: Any) -> JobFacts:
    base: dict[str, Any] = dict(job_id="10", attempt=0, partition="debug",
                                nodes=("n1", "n2"), suspects=("n2",), partition_size=10,
                                time=1_800_000_000.0,
                                proven=(("n2", "kernel log of n2: NVRM: Xid 48"),))
    base.update(kw)
    return JobFacts(**base)


def test_a_decision_s_planned_steps_are_plain_json_as_before() -> None:
    v = {"verdict": {"class": "gpu_hardware", "evidence": [], "root_node": "n2"},
         "failed": True}
    cfg = RecoveryConfig(mode="action", actions=vocab.ACTION_NAMES)
    d = decide(cfg, v, _facts(), [])
    out = d.to_json()
    assert json.dumps(out["planned"]) == (
        '[{"action": "drain_node", "target": "n2"}, {"action": "requeue", "target": "10"}]')
    assert out["recommended"][0] == "drain_node" and out["mode"] == "action"
    held = decide(RecoveryConfig(mode="action", rules=(("gpu_hardware", {
        "do": ["requeue", "hold"], "retries": 2}),)), v, _facts(), [])
    assert json.dumps(held.to_json()["planned"]) == \
        '[{"action": "requeue", "target": "10", "hold": true}]'
    mon = decide(RecoveryConfig(), v, _facts(), [])
    assert mon.planned == [] and json.dumps(mon.to_json()["would"]) == json.dumps(out["planned"])
    assert [n["why"] for n in mon.not_taken] == ["monitor mode", "monitor mode"]


def test_a_step_without_an_executor_fails_with_its_reason(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    from gpualert_slurm.recovery import actions
    from gpualert_slurm.recovery.audit import AuditLog

    monkeypatch.setattr(actions, "_not_this_job", lambda decision, deadline: None)
    audit = AuditLog(str(tmp_path / "audit.jsonl"))
    dec = {"id": "10.0", "job": "10", "attempt": 0, "class": "gpu_hardware"}
    out, results = execute(dec, [{"action": "hold", "target": "10"},
                                 {"action": "reboot", "target": "n1"}], audit, 1e18)
    assert [(r["action"], r["outcome"], r["why"]) for r in results] == [
        ("hold", "failed", "no executor for hold"),
        ("reboot", "failed", "no executor for reboot")]
    assert out == "completed"


def test_the_class_and_domain_vocabularies_are_the_shipped_table() -> None:
    classes = shipped_classes()
    assert set(vocab.CLASS_IDS) == set(classes)
    assert set(vocab.DOMAINS) == {c.domain for c in classes.values()}


def test_the_provenance_vocabulary_is_verdict_json_s() -> None:
    from gpualert_slurm.core import verdict

    assert verdict.ORIGINS == vocab.ORIGINS == ("slurm", "root", "job")
    assert set(vocab.TRUSTED_ORIGINS) < set(vocab.ORIGINS)
    assert yaml.safe_load("[slurm, root, job]") == list(vocab.ORIGINS)


def test_the_docs_table_is_made_from_the_rows() -> None:
    table = vocab.actions_table().splitlines()
    assert len(table) == 2 + len(ACTION_SPECS)
    assert table[4] == ("| `drain_node` | the node | a Slurm or root fact backing the class "
                        "on the node | yes | by its own executor | yes |")
    assert table[3].startswith("| `exclude_node` | the node | Slurm's word") \
        and "| with requeue |" in table[3]
    assert table[6].endswith("| by its own executor | no |")
