"""The failure classes (classify/classes.yaml): the one parser of that table. The classifier
builds its rule set on it; the config's recovery rules, recovery's attribution and the report
name classes and domains from it. It sits in core because all of them stand on it."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any


class ClassesError(ValueError):
    """The class table is invalid; the message names the file and the field."""


@dataclass(frozen=True)
class ClassInfo:
    id: str
    domain: str
    hint: str


def parse_classes(path: str, data: dict[str, Any]) -> dict[str, ClassInfo]:
    """The class table of a parsed classes.yaml (`path` is named in errors)."""
    classes: dict[str, ClassInfo] = {}
    raw = data.get("classes")
    if not isinstance(raw, dict):
        raise ClassesError(f"{path}: field 'classes' must be a mapping of class id -> "
                           "domain/hint")
    for cid, body in raw.items():
        if not isinstance(body, dict) or not isinstance(body.get("hint"), str):
            raise ClassesError(f"{path}: class {cid!r}: field 'hint' must be a string")
        classes[str(cid)] = ClassInfo(str(cid), str(body.get("domain", "unknown")), body["hint"])
    return classes


# The table's file, found from the top package: resources.files("gpualert_slurm.classify")
# would import the classifier (20 modules) into core, unseen by the import linter.
SHIPPED = ("classify", "classes.yaml")


@functools.cache
def shipped_classes() -> dict[str, ClassInfo]:
    from importlib import resources  # pathlib's import: only when this table is read

    import yaml

    text = resources.files("gpualert_slurm").joinpath(*SHIPPED).read_text(encoding="utf-8")
    return parse_classes("gpualert_slurm/" + "/".join(SHIPPED), yaml.safe_load(text))


def class_domains() -> dict[str, str]:
    """class id -> domain, of the shipped classes."""
    return {k: c.domain for k, c in shipped_classes().items()}
