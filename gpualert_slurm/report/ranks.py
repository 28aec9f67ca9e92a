"""The report's rank section for many-rank jobs: the root rank and node first, then the other
ranks grouped by what they did ("190 ranks (0-136,138-191) on n[1-48]: terminated by SIGTERM
after rank 137 failed, +0.2 to +0.9 s"), never one line per rank. From verdict.json's
"tasks" (each task's exit record) and the verdict's root rank and cascades."""

from __future__ import annotations

import re
import signal as _signal
from collections.abc import Mapping
from typing import Any

from gpualert_slurm.core.verdict import VerdictRecord

GROUP_FROM = 9  # ranks in the job (beyond the batch step) from which the section is grouped


def _sig_name(n: int) -> str:
    try:
        return _signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def outcome(t: Mapping[str, Any]) -> str:
    """What one task did, in words that group: same words, same group."""
    sig, code = t.get("signal"), t.get("exit_code")
    if sig:
        if sig == 15:
            return "terminated by SIGTERM (srun or Slurm ending the step)"
        if sig == 9:
            return "killed by SIGKILL"
        return f"killed by {_sig_name(int(sig))}"
    if code is None and t.get("end_time") is None:
        return "left no exit record (its node was lost, or the step never ended)"
    if code == 0:
        return "exited 0"
    return f"exited {code}"


def ranges(nums: list[int]) -> str:
    """[0,1,2,5,7,8] -> '0-2,5,7-8'."""
    out: list[str] = []
    nums = sorted(set(nums))
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        out.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ",".join(out)


def hostlist(nodes: list[str]) -> str:
    """['n1','n2','n3','gpu7'] -> 'n[1-3],gpu7' (Slurm's hostlist form, prefix by prefix)."""
    by_prefix: dict[str, list[int]] = {}
    plain: list[str] = []
    for n in sorted(set(nodes)):
        m = re.fullmatch(r"(.*?)(\d+)", n)
        if m and not (len(m.group(2)) > 1 and m.group(2).startswith("0")):
            by_prefix.setdefault(m.group(1), []).append(int(m.group(2)))
        else:
            plain.append(n)
    parts = [f"{p}{nums[0]}" if len(nums) == 1 else f"{p}[{ranges(nums)}]"
             for p, nums in sorted(by_prefix.items())]
    return ",".join(parts + plain)


def _rank_tasks(v: VerdictRecord) -> list[Mapping[str, Any]]:
    return [t for t in v.tasks if t.get("step") != "batch" and isinstance(t.get("rank"), int)]


def rank_groups(v: VerdictRecord | Mapping[str, Any], labels: dict[str, str] | None = None
                ) -> list[str]:
    """The lines of the grouped rank section, root first; [] for jobs with fewer than
    GROUP_FROM ranks (the report lists their cascades one by one)."""
    v = VerdictRecord.of(v)
    tasks = _rank_tasks(v)
    if len(tasks) < GROUP_FROM:
        return []
    labels = labels or {}
    rr, rs = v.cause.root_rank, v.cause.root_step
    root = next((t for t in tasks if t.get("rank") == rr
                 and (rs is None or str(t.get("step")) == str(rs))), None)
    lines: list[str] = []
    t0 = root.get("end_time") if root else None
    if root is not None:
        cls = v.cause.klass
        lines.append(f"root: rank {rr} on {root.get('node') or '?'}"
                     + (f" (step {root.get('step')})" if root.get("step") not in (None, "0")
                        else "")
                     + f": {labels.get(cls, cls)}, {outcome(root)}")
    cascade_cls: dict[int, str] = {}
    for c in v.cause.cascades:
        if c.rank is not None and c.cls:
            cascade_cls.setdefault(c.rank, c.cls)
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for t in tasks:
        if t is root:
            continue
        groups.setdefault((str(t.get("step")), outcome(t)), []).append(t)
    steps = {k[0] for k in groups} | ({str(root.get("step"))} if root else set())
    for (step, what), ts in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        n = len(ts)
        s = (f"{n} rank{'s' if n != 1 else ''} ({ranges([t['rank'] for t in ts])}) on "
             f"{hostlist([t.get('node') or '?' for t in ts])}"
             + (f", step {step}" if len(steps) > 1 else "") + f": {what}")
        seen = [cascade_cls[t["rank"]] for t in ts if t["rank"] in cascade_cls]
        if seen:
            top = max(set(seen), key=seen.count)
            s += f"; {labels.get(top, top)} in the {seen.count(top)} of their logs read"
        ends = [t["end_time"] for t in ts if isinstance(t.get("end_time"), int | float)]
        if t0 is not None and ends:
            lo, hi = min(ends) - t0, max(ends) - t0
            if lo >= 0:
                s += f", after rank {rr} failed (+{lo:.1f} to +{hi:.1f} s)"
            else:
                s += f" ({lo:+.1f} to {hi:+.1f} s from rank {rr}'s end)"
        lines.append(s)
    return lines


def attachment_groups(attached: list[dict[str, Any]], keep: int = 6
                      ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The attachments to list one by one, and one line for the rest of the task logs
    (count, total size) when a many-rank job attaches more than `keep` of them."""
    logs = [a for a in attached if a.get("kind") == "log"]
    if len(logs) <= keep + 1:
        return attached, None
    rest = logs[keep:]
    rest_ids = {id(a) for a in rest}
    return ([a for a in attached if id(a) not in rest_ids],
            {"count": len(rest), "size": sum(int(a.get("size") or 0) for a in rest),
             "attached_size": sum(int(a.get("attached_size") or 0) for a in rest)})


def group_node_notes(notes: list[str]) -> list[str]:
    """'node n1: X', 'node n2: X', ... -> 'nodes n[1-2]: X': a 48-node job missing its node
    verdicts says so once, not 48 times. Other notes are kept as they are, in order."""
    out: list[Any] = []
    groups: dict[str, list[str]] = {}
    for n in notes:
        m = re.fullmatch(r"node (\S+): (.*)", str(n), re.S)
        if not m:
            out.append(n)
            continue
        if m.group(2) not in groups:
            groups[m.group(2)] = []
            out.append(("group", m.group(2)))
        groups[m.group(2)].append(m.group(1))
    return [x if not isinstance(x, tuple) else
            (f"node {groups[x[1]][0]}: {x[1]}" if len(groups[x[1]]) == 1 else
             f"nodes {hostlist(groups[x[1]])}: {x[1]}") for x in out]
