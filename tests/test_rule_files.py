"""The shipped rules are one file per failure family (classify/rules/*.yaml), read in file-name
order as one list: the rule set's order is the files' order, and an id is shipped once."""

from __future__ import annotations

import pytest
import yaml

from gpualert_slurm.classify import rules as rules_mod
from gpualert_slurm.classify.rules import RuleError, build_rules, load_rules


def test_the_rule_list_is_the_family_files_in_file_name_order():
    names = rules_mod.shipped_rule_files()
    assert names == sorted(names) and len(names) > 10
    ids = []
    for n in names:
        doc = yaml.safe_load(rules_mod.shipped_bytes(f"rules/{n}")) or {}
        ids += [r["id"] for r in doc.get("rules", [])]
    rs = load_rules(use_cache=False, site=False)
    assert [r.id for r in rs.rules] == ids
    assert {r.origin for r in rs.rules} <= {f"{rules_mod.RULES_DIR}/{n}" for n in names}


def test_an_id_in_two_family_files_is_an_error_naming_both():
    classes = (rules_mod.CLASSES_FILE, rules_mod.shipped_bytes("classes.yaml"))
    rule = b"rules:\n  - id: twice\n    class: disk_full\n    patterns: ['No space left']\n"
    a, b = f"{rules_mod.RULES_DIR}/10-a.yaml", f"{rules_mod.RULES_DIR}/20-b.yaml"
    with pytest.raises(RuleError) as e:
        build_rules([classes, (a, rule), (b, rule)])
    assert b in str(e.value) and a in str(e.value) and "duplicate id" in str(e.value)
    # a site file with a shipped id replaces the shipped rule, as before
    site = rule.replace(b"No space left", b"Disk quota exceeded")
    rs = build_rules([classes, (a, rule), ("/etc/gpualert/rules.d/x.yaml", site)])
    assert [(r.id, r.origin) for r in rs.rules] == [("twice", "/etc/gpualert/rules.d/x.yaml")]
