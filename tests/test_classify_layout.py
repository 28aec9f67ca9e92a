"""The classifier's tests mirror its rule families: every classify/rules/NN-<family>.yaml has
its tests/test_classify_<family>.py (the family's dashes as underscores), whose docstring names
that rule file; and every tests/test_classify_*.py is a family's, or one of the few listed
below that test the classifier as a whole. A new family file needs its test file; a new test
of a family goes to that family's file, not to a file named after whatever found it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
RULES = TESTS.parent / "gpualert_slurm/classify/rules"

# test_classify_<name>.py files that are no family's, and what they test
WHOLE = {
    "cli": "`gpualert classify` as a user runs it",
    "decision_order": "the decision order between families (precedence.yaml's steps)",
    "hostile_jobdir": "`gpualert classify` on a job dir its user filled with traps",
    "layout": "this mirror",
    "precedence": "precedence.yaml and the steps it orders",
    "realworld": "inputs as real logs have them; every rule's literals against the corpus",
}


def families() -> dict[str, str]:
    """test file name -> its rule file's name."""
    out = {}
    for f in sorted(RULES.glob("*.yaml")):
        m = re.fullmatch(r"\d\d-([a-z0-9-]+)\.yaml", f.name)
        assert m, f"{f.name}: a rule family file is NN-<family>.yaml"
        out[f"test_classify_{m.group(1).replace('-', '_')}.py"] = f.name
    return out


def test_every_rule_family_has_its_test_file() -> None:
    fams = families()
    assert len(fams) >= 19
    missing = [f"tests/{t} (for rules/{r})" for t, r in fams.items() if not (TESTS / t).exists()]
    assert not missing, missing


def test_each_family_test_file_says_which_rule_file_it_covers() -> None:
    for t, r in families().items():
        doc = ast.get_docstring(ast.parse((TESTS / t).read_text())) or ""
        assert r in doc, f"tests/{t}: its docstring does not name rules/{r}"


def test_every_classifier_test_file_is_a_family_or_listed() -> None:
    fams = families()
    stray = [f.name for f in sorted(TESTS.glob("test_classify_*.py"))
             if f.name not in fams and f.name[len("test_classify_"):-3] not in WHOLE]
    assert not stray, f"{stray}: put these tests in their families' files"
    gone = [w for w in WHOLE if not (TESTS / f"test_classify_{w}.py").exists()]
    assert not gone, f"WHOLE lists files that are gone: {gone}"
