"""The family of classify/rules/00-prefilter.yaml: the prefilter's gate words (the file holds no
rules). A line of a log is matched against the rules only if it holds a gate word; a rule
literal that holds none of the shipped gates becomes a gate of its own when the rules load, so
that no rule, shipped or a site's, is ever out of the prefilter's reach."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpualert_slurm.classify import JobFacts, TaskInput, classify, load_rules
from gpualert_slurm.classify.ruleset import TEXT_SOURCES

PREFILTER = Path(__file__).resolve().parents[1] / "gpualert_slurm/classify/rules/00-prefilter.yaml"


def shipped_gates() -> list[str]:
    return [str(g).lower() for g in yaml.safe_load(PREFILTER.read_text())["prefilter"]]


def test_the_file_is_gate_words_only() -> None:
    doc = yaml.safe_load(PREFILTER.read_text())
    assert set(doc) == {"prefilter"}
    gates = shipped_gates()
    assert gates and len(set(gates)) == len(gates), "a gate word listed twice"


def test_every_literal_of_a_deciding_rule_holds_a_gate_of_its_source() -> None:
    rs = load_rules(use_cache=False, site=False)
    for source in TEXT_SOURCES:
        gates = rs.prefilter[source]
        for r in rs.scanned(source):
            if r.role == "context":  # tried on every line some gate let through
                continue
            for lit in r.literals:
                assert any(g in lit for g in gates), (source, r.id, lit)


def test_the_shipped_gates_are_the_ones_used_first() -> None:
    rs = load_rules(use_cache=False, site=False)
    shipped = shipped_gates()
    used = rs.prefilter["log"]
    # the file's words come first, in its order; gates made of a rule's literal follow them
    ours = [g for g in used if g in shipped]
    assert ours == [g for g in shipped if g in ours]
    assert used[:len(ours)] == ours
    assert {"error", "nccl", "xid", "cuda"} <= set(ours)


def test_a_site_rule_whose_words_hold_no_gate_still_decides(tmp_path: Path) -> None:
    words = "zorblax flux capacitor melted"
    assert not any(g in words for g in shipped_gates())  # no shipped gate would let it through
    site = tmp_path / "site.yaml"
    site.write_text("rules:\n  - id: site_flux_melt\n    class: gpu_hardware\n    role: root\n"
                    f"    priority: 90\n    patterns: ['{words}']\n")
    rs = load_rules(extra_files=[site], use_cache=False, site=False)
    assert any(g in words for g in rs.prefilter["log"])  # its literal became a gate
    log = tmp_path / "0.0.log"
    log.write_text(f"step 1 loss 0.5\nrack 7: {words} on gpu 3\n")
    assert classify([TaskInput(str(log))], JobFacts(exit_code=1), rs).cls == "gpu_hardware"
    # and without the rule the line decides nothing
    assert classify([TaskInput(str(log))], JobFacts(exit_code=1),
                    load_rules(use_cache=False, site=False)).cls == "unknown"
