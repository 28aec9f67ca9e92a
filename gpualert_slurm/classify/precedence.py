"""precedence.yaml, the order in which the kinds of evidence decide: read into a Precedence
value (the step ids in order, and the rule ids some steps name), checked against the steps
that exist. Nothing is kept here: steps.py holds the shipped file's value."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from gpualert_slurm.classify.rules import RuleError, parse_yaml

PRECEDENCE_FILE = "gpualert_slurm/classify/precedence.yaml"


@dataclass(frozen=True)
class Precedence:
    steps: tuple[str, ...]  # the step ids, first to decide first; 'unknown' among them
    # a step's `symptoms` (rule ids), by step id
    symptoms: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # a step's `verdicts` (rule ids), by step id; its `verdicts_over_warnings` by
    # "<step id>:verdicts_over_warnings"
    verdicts: Mapping[str, frozenset[str]] = field(default_factory=dict)


def load(text: str | None, known: Collection[str]) -> Precedence:
    """precedence.yaml (or `text`) read. Raises RuleError naming the file and field when an id
    names no step of `known`, one is repeated, or 'unknown' (the last resort) is missing."""
    if text is None:  # from the rule cache when it holds it (no YAML parser to import)
        from gpualert_slurm.classify.rulecache import shipped_yaml

        data = shipped_yaml("precedence.yaml", PRECEDENCE_FILE) or {}
    else:
        data = parse_yaml(PRECEDENCE_FILE, text) or {}
    steps = data.get("steps") if isinstance(data, dict) else None
    if not isinstance(steps, list):
        raise RuleError(f"{PRECEDENCE_FILE}: field 'steps' must be a list of {{id, why}}")
    ids = [s.get("id") if isinstance(s, dict) else s for s in steps]
    bad = [i for i in ids if i not in known]
    if bad:
        raise RuleError(f"{PRECEDENCE_FILE}: field 'steps': unknown step id(s) {bad}; known: "
                        f"{', '.join(known)}")
    if len(set(ids)) != len(ids) or "unknown" not in ids:
        raise RuleError(f"{PRECEDENCE_FILE}: field 'steps': each step once, 'unknown' included")
    return Precedence(tuple(ids), _rule_lists(steps, ("symptoms",)),
                      _rule_lists(steps, ("verdicts", "verdicts_over_warnings")))


def _rule_lists(steps: list, keys: tuple[str, ...]) -> dict[str, frozenset[str]]:
    """Each step's lists of rule ids under `keys`, by step id (the first key) or by
    "<step id>:<key>" (the others). Raises RuleError on a list that is not of strings."""
    out: dict[str, frozenset[str]] = {}
    for s in steps:
        for key in keys:
            said = s.get(key) if isinstance(s, dict) else None
            if said is None:
                continue
            if not (isinstance(said, list) and all(isinstance(x, str) for x in said)):
                raise RuleError(f"{PRECEDENCE_FILE}: step {s.get('id')!r}: field {key!r} must "
                                f"be a list of rule ids, got {said!r}")
            out[s["id"] if key == keys[0] else f"{s['id']}:{key}"] = frozenset(said)
    return out
