"""Which classes a node's sealed driver lines back (verdict.json's "trusted"): root's facts
(core/provenance.py checks their seal) judged by the classifier's kernel rules, inside Slurm's
window for this attempt and on the job's GPUs where known."""

from __future__ import annotations

from typing import Any

from gpualert_slurm.classify.rules import load_rules
from gpualert_slurm.core.kernel_lines import without_comm
from gpualert_slurm.core.provenance import WINDOW_SLACK_S, Checked


def _kernel_classes(text: str) -> list[str]:
    """The classes the classifier's kernel rules give this driver line, the process name it
    quotes left out (without_comm)."""
    text = without_comm(text)

    try:
        rs = load_rules()
    except Exception:  # a broken site rule: the shipped ones
        rs = load_rules(site=False)
    return sorted({r.cls for r in rs.for_source("kernel") if r.match(text)})


def node_trust(rec: Any, checked: Checked, start: float | None, end: float | None
               ) -> dict[str, Any]:
    """One node's entry of verdict.json's "trusted": whether its root facts checked, and the
    driver lines of them that fall in Slurm's window and on the job's GPUs (where known),
    each with the classes the kernel rules give it."""
    out: dict[str, Any] = {"verified": checked.verified, "origin": checked.origin,
                           "why": checked.why, "driver": [], "nvml_changed": [],
                           "kernel_lines": 0}
    if not checked.verified:
        return out
    rf = rec["root_facts"]
    k = rf.get("kernel") or {}
    lines = [x for x in k.get("lines") or [] if isinstance(x, dict)]
    out["kernel_lines"] = len(lines)
    out["kernel_absent"] = k.get("absent")
    out["window_source"] = rf.get("window_source")
    gpus = rf.get("gpus")
    for x in lines:
        if "xid" not in x:
            continue
        t = x.get("time")
        why = None
        if not isinstance(t, int | float):
            why = "the line has no time stamp"
        elif (start is not None and t < start - WINDOW_SLACK_S) or \
                (end is not None and t > end + WINDOW_SLACK_S):
            why = "outside the job's window as Slurm gives it"
        elif rf.get("kmsg_writable"):
            why = str(rf["kmsg_writable"])
        elif isinstance(gpus, list) and gpus and x.get("pci") not in gpus:
            why = f"GPU {x.get('pci')} is not one of the job's ({', '.join(map(str, gpus))})"
        item = {"text": str(x.get("text"))[:400], "time": t, "pci": x.get("pci"),
                "xid": x.get("xid"), "classes": [] if why else _kernel_classes(str(x["text"]))}
        if why:
            item["ignored"] = why
        out["driver"].append(item)
    nv = rf.get("nvml") or {}
    out["nvml_changed"] = [c for c in nv.get("changed") or [] if isinstance(c, dict)]
    return out
