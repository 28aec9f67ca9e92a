"""The words the parts share, as types: recovery's actions (one ActionSpec row each), its
modes, where a fact comes from (provenance), and the failure classes' ids and domains.

The action table sits here, in core, because the config's validation (core/config.py), the
report's sentences (report/recovery_lines.py) and recovery itself (policy, executors) all read
it, and the report and recovery may not import each other (.importlinter). What each action
runs is recovery/actions.py's EXECUTORS, keyed by these names; tests/test_action_specs.py
checks that both tables, the config's whitelist and docs/RECOVERY.md agree.

StrEnum members are str: they compare equal to the strings in the YAML, the audit log and
verdict.json, and json writes them as those strings, so nothing on disk changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal, NotRequired, TypedDict, get_args


class Action(StrEnum):
    """What recovery may do (recovery.actions is a whitelist of these)."""

    REQUEUE = "requeue"
    EXCLUDE_NODE = "exclude_node"
    DRAIN_NODE = "drain_node"
    HOLD = "hold"
    CANCEL = "cancel"


class Need(StrEnum):
    """Whose word an action needs about its target (docs/SECURITY.md, section 3)."""

    JOB = "job"  # acts on the job itself: the verdict (whatever its evidence's origin) suffices
    RAN = "ran"  # a node Slurm says ran this attempt (the job's own requeue may leave it out)
    PROVEN = "proven"  # a node where a Slurm or root fact backs the class


Target = Literal["node", "job"]


@dataclass(frozen=True)
class ActionSpec:
    """One recovery action: what it acts on, on whose word, whether the drain breaker counts
    it, what carries it out, and how the report says it. `taken` and `planned` are sentence
    parts ({target}: the node; {held}: " (held)" for a held requeue); None: the report's
    generic wording."""

    name: Action
    target: Target
    needs: Need
    breaker: bool  # counted by the partition's drain breaker and the per-user cap
    carried_by: Action | None  # None: has an executor of its own; else done with that one
    default_allowed: bool  # in recovery.actions when the config does not list them
    taken: str | None = None  # "gpualert <taken>: <outcome>."
    planned: str | None = None  # "gpualert <planned> now (right after this report)."

    @property
    def words(self) -> str:
        """The action in the report's running text ("drain node")."""
        return self.name.replace("_", " ")


ACTION_SPECS: Mapping[Action, ActionSpec] = {s.name: s for s in (
    ActionSpec(Action.REQUEUE, "job", Need.JOB, breaker=False, carried_by=None,
               default_allowed=True, taken="requeued the job{held}",
               planned="requeues the job{held}"),
    # "the requeue excludes the suspect node(s)": only nodes Slurm ran this attempt on
    ActionSpec(Action.EXCLUDE_NODE, "node", Need.RAN, breaker=False,
               carried_by=Action.REQUEUE, default_allowed=True),
    ActionSpec(Action.DRAIN_NODE, "node", Need.PROVEN, breaker=True, carried_by=None,
               default_allowed=True, taken="drained node {target}",
               planned="drains node {target}"),
    # "requeue held, for a person to release"
    ActionSpec(Action.HOLD, "job", Need.JOB, breaker=False, carried_by=Action.REQUEUE,
               default_allowed=True),
    # only when an admin adds it to recovery.actions
    ActionSpec(Action.CANCEL, "job", Need.JOB, breaker=False, carried_by=None,
               default_allowed=False, taken="cancelled the job", planned="cancels the job"),
)}

ACTION_NAMES: tuple[str, ...] = tuple(str(a) for a in ACTION_SPECS)
DEFAULT_ACTIONS: tuple[str, ...] = tuple(str(s.name) for s in ACTION_SPECS.values()
                                         if s.default_allowed)
# the requeue and what goes with it: what a spent retry budget stops
REQUEUE_FAMILY: tuple[str, ...] = tuple(str(s.name) for s in ACTION_SPECS.values()
                                        if Action.REQUEUE in (s.name, s.carried_by))
# what acts on nodes (a blast radius stops them), the drain first
NODE_ACTIONS: tuple[str, ...] = tuple(str(s.name) for s in sorted(
    (s for s in ACTION_SPECS.values() if s.target == "node"), key=lambda s: not s.breaker))

# The audit's first result of every decision: Slurm's job of that id is the verdict's.
CHECK = "check"
CHECK_TAKEN = "checked the job"


def spec_of(name: object) -> ActionSpec | None:
    """The row of an action named in a rule, a record or the config; None: no such action."""
    try:
        return ACTION_SPECS[Action(str(name))]
    except ValueError:
        return None


NEED_WORDS: Mapping[Need, str] = {
    Need.JOB: "the verdict (any origin): it acts on the job itself",
    Need.RAN: "Slurm's word that this attempt ran on the node",
    Need.PROVEN: "a Slurm or root fact backing the class on the node",
}


def actions_table() -> str:
    """ACTION_SPECS as a Markdown table, for the docs (docs/RECOVERY.md)."""
    rows = ["| action | acts on | needs | breaker counts it | carried out | in the default "
            "whitelist |", "| --- | --- | --- | --- | --- | --- |"]
    for s in ACTION_SPECS.values():
        how = f"with {s.carried_by}" if s.carried_by else "by its own executor"
        rows.append(f"| `{s.name}` | the {s.target} | {NEED_WORDS[s.needs]} | "
                    f"{'yes' if s.breaker else 'no'} | {how} | "
                    f"{'yes' if s.default_allowed else 'no'} |")
    return "\n".join(rows) + "\n"


class PlannedStep(TypedDict):
    """One step of a decision's plan (verdict.json's and the audit's "planned" / "would")."""

    action: str
    target: str
    hold: NotRequired[bool]  # a requeue: held, for a person to release


class NotTaken(TypedDict):
    """An action a decision did not take, and why (its "not_taken")."""

    action: str
    why: str
    target: NotRequired[str]
    hold: NotRequired[bool]
    provenance: NotRequired[bool]  # True: the fact it needs did not come from Slurm or root


# The built-in notification channel (notify/channels.py); notify.channels names the others.
MAIL_CHANNEL = "mail"


class Mode(StrEnum):
    """recovery.mode: monitor records what would be done; action does it."""

    MONITOR = "monitor"
    ACTION = "action"


MODES: tuple[str, ...] = tuple(str(m) for m in Mode)

# Who a fact comes from (core/verdict.py's Provenance.origin): Slurm's and root's word may
# act on a node; the job's may not (docs/SECURITY.md).
Origin = Literal["slurm", "root", "job"]
ORIGINS: tuple[Origin, ...] = get_args(Origin)
TRUSTED_ORIGINS: tuple[Origin, ...] = ("slurm", "root")

# The failure classes' domains and ids (classify/classes.yaml is the table, read by
# core/classes.py; tests/test_action_specs.py checks these lists against it).
Domain = Literal["workload", "infrastructure", "scheduler", "unknown", "none"]
DOMAINS: tuple[Domain, ...] = get_args(Domain)
ClassId = Literal[
    "cancelled", "checkpoint_corrupt", "collective_timeout", "cuda_device_assert", "cuda_error",
    "cuda_oom", "cuda_setup", "dataloader_worker", "device_mismatch", "disk_full",
    "file_not_found", "gpu_hardware", "hang", "host_oom", "import_error", "killed",
    "nan_divergence", "nccl_error", "node_failure", "permission_denied", "preempted",
    "python_exception", "segfault", "storage_io", "success", "time_limit", "unknown"]
CLASS_IDS: tuple[ClassId, ...] = get_args(ClassId)


if __name__ == "__main__":  # python -m gpualert_slurm.core.vocab: the table for the docs
    print(actions_table(), end="")
