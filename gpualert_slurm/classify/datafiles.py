"""The classifier's shipped data files (classify/*.yaml, classify/rules/*.yaml): where they
are, their bytes, their YAML."""

from __future__ import annotations

import os

from gpualert_slurm.classify.ruleset import RuleError

_HERE = os.path.dirname(os.path.abspath(__file__))
CLASSES_FILE = "gpualert_slurm/classify/classes.yaml"
# the shipped rules: one file per failure family, read in file-name order as one list (like a
# rules.d; a rule's place decides ties among equal priorities), named in errors as
# RULES_DIR/<file>
RULES_DIR = "gpualert_slurm/classify/rules"


def shipped_rule_files() -> list[str]:
    """The shipped rule files (classify/rules/*.yaml), in the order they are read."""
    return sorted(n for n in os.listdir(os.path.join(_HERE, "rules")) if n.endswith(".yaml"))


def shipped_bytes(name: str) -> bytes:
    """A data file shipped beside this module (classify/*.yaml), as bytes."""
    with open(os.path.join(_HERE, name), "rb") as f:
        return f.read()


def parse_yaml(path: str, text: str):
    """YAML text parsed (PyYAML's safe loader); RuleError naming `path` when it is not YAML."""
    import yaml  # only when a file is parsed: a cached rule set needs no YAML

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise RuleError(f"{path}: not valid YAML: {e}") from None
