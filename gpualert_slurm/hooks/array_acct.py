"""The tasks of an array that accounting says ran, for the array's one summary: slurmctld
forgets a finished task MinJobAge after its end (30 s on the test cluster, 300 s by default),
and in a burst a detached job epilog may start later than that, so squeue alone lets the
summary go out before the forgotten tasks' epilogs have recorded them (seen: "6 of 6 tasks"
for a 100-task array ending at once on 2 loaded cores)."""

from __future__ import annotations

import time
from typing import Any

from gpualert_slurm.core import slurm
from gpualert_slurm.core.slurm_records import FINAL_STATES

SACCT_S = 5.0
GONE_AFTER_S = 600.0  # a task that ended longer ago than any job epilog runs: not waited for


def ran_tasks(array_id: str, timeout: float = SACCT_S) -> dict[str, float] | None:
    """task id -> end time (0 while running) of every task of the array that got nodes; None
    when sacct cannot be asked. Pending tasks ('123_[4-9]') have no epilog to wait for."""
    try:
        out = slurm.run(["sacct", "-n", "-X", "-P", "-j", array_id,
                         "-o", "JobID,NodeList,End"], timeout=timeout)
    except slurm.SlurmError:
        return None
    ran: dict[str, float] = {}
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) != 3:
            continue
        arr, sep, task = parts[0].partition("_")
        if arr != array_id or not sep or not task.isdigit():
            continue
        if parts[1].strip() in ("", "None assigned", "(null)"):
            continue
        try:
            end = time.mktime(time.strptime(parts[2].strip(), "%Y-%m-%dT%H:%M:%S"))
        except ValueError:  # Unknown: still running
            end = 0.0
        ran[task] = end
    return ran


def still_to_come(state: dict[str, Any], done: set[str], now: float) -> set[str]:
    """Tasks accounting says ran whose epilog has not recorded them yet. Asks sacct only when
    the array's state holds no such task from an earlier answer (about twice per array, not
    once per task); the answer is kept in state['accounted']."""
    def pending(ran: dict[str, float]) -> set[str]:
        return {t for t, end in ran.items() if t not in done
                and not (end and now - end > GONE_AFTER_S)}

    kept = state.get("accounted")
    if isinstance(kept, dict):
        left = pending(kept)
        if left:
            return left
    ran = ran_tasks(state.get("array_id") or "") if state.get("array_id") else None
    if ran is None:
        return set()
    state["accounted"] = ran
    return pending(ran)


def accounted(array_id: str, timeout: float = SACCT_S) -> dict[str, tuple[str, float, str]] | None:
    """task id -> (its own job id, end time or 0, state) of every task of the array that got
    nodes, as accounting has it; None when sacct cannot be asked."""
    try:
        out = slurm.run(["sacct", "-n", "-X", "-P", "-j", array_id,
                         "-o", "JobID,JobIDRaw,NodeList,End,State"], timeout=timeout)
    except slurm.SlurmError:
        return None
    got: dict[str, tuple[str, float, str]] = {}
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) != 5:
            continue
        arr, sep, task = parts[0].partition("_")
        if arr != array_id or not sep or not task.isdigit() or not parts[1].isdigit():
            continue
        if parts[2].strip() in ("", "None assigned", "(null)"):
            continue
        try:
            end = time.mktime(time.strptime(parts[3].strip(), "%Y-%m-%dT%H:%M:%S"))
        except ValueError:
            end = 0.0
        got[task] = (parts[1], end, parts[4].split()[0] if parts[4].strip() else "")
    return got


def task_states(array_id: str, timeout: float = SACCT_S) -> dict[str, str] | None:
    """Task id -> its state, of every task slurmctld still holds (final ones included, until
    MinJobAge); {} when it forgot the whole array, None when Slurm cannot be asked."""
    try:
        out = slurm.run(["squeue", "-h", "-r", "-t", "all", "-j", array_id,
                         "-o", "%F|%K|%T"], timeout=timeout)
    except slurm.JobNotFound:
        return {}  # slurmctld forgot the whole array (MinJobAge): none is active
    except slurm.SlurmError:
        return None
    return {p[1]: p[2] for p in (ln.split("|") for ln in out.splitlines())
            if len(p) == 3 and p[0] == array_id}


def active_tasks(array_id: str, timeout: float = SACCT_S) -> set[str] | None:
    """Task ids slurmctld still holds in a state that is not final (pending, running,
    completing: a job epilog may still come); None when Slurm cannot be asked."""
    states = task_states(array_id, timeout)
    if states is None:
        return None
    return {t for t, state in states.items() if state not in FINAL_STATES}
