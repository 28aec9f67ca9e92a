"""Job arrays and rate caps: one summary per array, sent by the task whose epilog ends last
(root's state under <spool>/.gpualert/arrays/), at most max_per_array per-task reports per array
and max_per_user_hour reports per user."""

from __future__ import annotations

import time
from typing import Any

from gpualert_slurm.core import slurm
from gpualert_slurm.core.config import Config
from gpualert_slurm.core.slurm_records import FINAL_STATES
from gpualert_slurm.hooks import array_acct
from gpualert_slurm.hooks.job_epilog.context import JobEpilog, report_cfg
from gpualert_slurm.hooks.job_epilog.facts import SLURM_CALL_S
from gpualert_slurm.hooks.job_epilog.state import Locked, state_dir
from gpualert_slurm.hooks.jobspool import node_file_name


def rate_ok(cfg: Config, user: str, now: float) -> bool:
    """At most max_per_user_hour reports to one user in the last hour (counted when sent)."""
    cap = report_cfg(cfg).max_per_user_hour
    safe = node_file_name(user or "unknown")
    try:
        with Locked(state_dir(cfg, "rate"), safe) as lk:
            times = [t for t in lk.state.get("sent", []) if now - t < 3600]
            ok = len(times) < cap
            if ok:
                times.append(now)
            lk.state = {"sent": times}
            lk.save()
    except OSError:  # a full or broken spool: the cap cannot count, the report still goes
        return True
    return ok


def per_array_ok(cfg: Config, v: dict[str, Any]) -> bool:
    """At most max_per_array per-task reports for one array (per_task mode)."""
    cap = report_cfg(cfg).max_per_array
    try:
        with Locked(state_dir(cfg, "arrays"), str(v["array"]["job_id"])) as lk:
            n = lk.state.get("per_task_sent", 0)
            if n >= cap:
                return False
            lk.state["per_task_sent"] = n + 1
            lk.save()
    except OSError:
        return True
    return True


def array_task_summary(v: dict[str, Any]) -> dict[str, Any]:
    verdict = v.get("verdict") or {}
    return {"job_id": v.get("job_id"), "task_id": (v.get("array") or {}).get("task_id"),
            "class": verdict.get("class"), "failed": bool(v.get("failed")
                                                          or v.get("silent_failure")),
            "hint": verdict.get("hint"), "root_node": verdict.get("root_node"),
            "root_rank": verdict.get("root_rank"), "evidence": (verdict.get("evidence") or [])[:4],
            "name": (v.get("job") or {}).get("name"), "user": (v.get("job") or {}).get("user"),
            "ran": True}


def remaining_array_tasks(array_id: str) -> tuple[set[str], set[str], set[str]] | None:
    """Task ids of the array whose job epilog is still to come: every task slurmctld still
    holds (all states), except those that ended without ever getting a node (cancelled while
    pending: no epilog runs for them); those never-ran ones; and, of the first, those that
    have nodes (running or ended: their epilog comes for sure). None when Slurm cannot be
    asked."""
    try:
        # %F: the array's job id (%A is each task's own on 22.05 with -r); %K: the task id
        out = slurm.run(["squeue", "-h", "-r", "-t", "all", "-j", array_id,
                         "-o", "%F|%K|%T|%N"], timeout=SLURM_CALL_S)
    except slurm.SlurmError:
        return None
    left, never, had_nodes = set(), set(), set()
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) != 4 or parts[0] != array_id:
            continue
        task, state, nodes = parts[1], parts[2], parts[3].strip()
        if state in FINAL_STATES and nodes in ("", "(null)"):
            never.add(task)
            continue
        left.add(task)
        if nodes not in ("", "(null)"):
            had_nodes.add(task)
    return left, never, had_nodes


def array_begin(ctx: JobEpilog) -> None:
    """Mark this task's epilog as in flight, before the slow part: another task that finishes
    meanwhile then knows not to send the summary without it."""
    array_id, task_id, own_job = ctx.array_id, ctx.task_id, ctx.jobid
    with Locked(state_dir(ctx.cfg, "arrays"), array_id) as lk:
        tasks = lk.state.setdefault("tasks", {})
        if task_id not in tasks:
            tasks[task_id] = {"task_id": task_id, "job_id": own_job, "in_flight": True,
                              "since": time.time()}
            lk.save()


def array_step(ctx: JobEpilog, v: dict[str, Any] | None) -> dict[str, Any] | None:
    """Record this task in the array's state; return the array summary when this task is the
    last one to end (exactly one task sends it), else None. A task that never ran (no spool
    dir) is recorded as such, so an array cancelled before any task ran ends with no report and
    nothing left waiting; nothing here is ever retried."""
    array_id, task_id, own_job = ctx.array_id, ctx.task_id, ctx.jobid
    with Locked(state_dir(ctx.cfg, "arrays"), array_id) as lk:
        tasks = lk.state.setdefault("tasks", {})
        tasks[task_id] = array_task_summary(v) if v else {"task_id": task_id,
                                                           "job_id": own_job, "ran": False}
        left, never = _still_to_come(lk.state, array_id, task_id)
        for t in never - set(tasks):
            tasks[t] = {"task_id": t, "ran": False}
        done_ids = {t for t, rec in tasks.items() if not rec.get("in_flight")}
        # an epilog in flight for longer than any epilog can run has died: don't wait for it
        stale = {t for t, rec in tasks.items() if rec.get("in_flight")
                 and time.time() - rec.get("since", 0) > 600}
        waiting = {t for t, rec in tasks.items() if rec.get("in_flight")} - stale
        if left is not None:
            waiting |= left - done_ids - stale
        waiting.discard(task_id)
        if not waiting and not lk.state.get("sent"):
            # tasks slurmctld already forgot (MinJobAge) may still have an epilog to come
            lk.state["array_id"] = array_id
            waiting = array_acct.still_to_come(lk.state, done_ids | stale | {task_id},
                                                time.time())
        done = not waiting and not lk.state.get("sent")
        if done:
            lk.state["sent"] = time.time()
        lk.state["updated"] = time.time()
        lk.save()
        if not done:
            return None
        return {"array_id": array_id,
                "tasks": {t: r for t, r in tasks.items() if not r.get("in_flight")}}


def _still_to_come(state: dict[str, Any], array_id: str, task_id: str
                   ) -> tuple[set[str] | None, set[str]]:
    """(tasks whose job epilog is still to come, tasks that never ran), as
    remaining_array_tasks says, but asking slurmctld only when its last answer (kept in
    state['to_come']) holds no task that is still to come: while one is, this task cannot be
    the last, whatever slurmctld says now. Every task of a 500-task burst asked for the whole
    array (500 records each) inside the array's lock: about three asks per array now. Only
    tasks that had nodes are kept (a pending one may yet be cancelled, and no epilog comes)."""
    tasks = state.get("tasks") or {}
    done = {t for t, rec in tasks.items() if isinstance(rec, dict) and not rec.get("in_flight")}
    # an epilog in flight for longer than any epilog can run has died (as array_step says)
    stale = {t for t, rec in tasks.items() if isinstance(rec, dict) and rec.get("in_flight")
             and time.time() - rec.get("since", 0) > 600}
    kept = state.get("to_come")
    if isinstance(kept, list):
        known = {str(t) for t in kept} - done - stale - {task_id}
        if known:
            return known, set()
    asked = remaining_array_tasks(array_id)
    if asked is None:
        return None, set()
    left, never, had_nodes = asked
    state["to_come"] = sorted(had_nodes - done, key=lambda t: int(t) if t.isdigit() else 0)
    return left, never


def array_context(summary: dict[str, Any], spool: str) -> dict[str, Any]:
    from gpualert_slurm.report import header_text, labels

    ran = [t for t in summary["tasks"].values() if t.get("ran")]
    never = [t for t in summary["tasks"].values() if not t.get("ran")]
    failed = [t for t in ran if t.get("failed")]
    groups: dict[str, list[dict[str, Any]]] = {}
    for t in sorted(failed, key=lambda t: int(t["task_id"]) if str(t["task_id"]).isdigit()
                    else 0):
        groups.setdefault(t.get("class") or "unknown", []).append(t)
    name = next((t.get("name") for t in ran if t.get("name")), "")
    gl = [{"cls": c, "label": labels().get(c, c), "count": len(ts),
           "tasks": [str(t["task_id"]) for t in ts], "first": ts[0], "hint": ts[0].get("hint")}
          for c, ts in sorted(groups.items(), key=lambda kv: -len(kv[1]))]
    word = f"{len(failed)} of {len(ran)} tasks FAILED" if failed else f"all {len(ran)} tasks OK"
    classes = ", ".join(f"{g['label']} x{g['count']}" for g in gl[:3])
    headline = f"array {summary['array_id']}" + (f" ({header_text(name, 60)})" if name else "") \
        + f": {word}" + (f": {classes}" if classes else "")
    return {"array_id": summary["array_id"], "name": name, "total": len(ran),
            "failed": len(failed), "ok": len(ran) - len(failed), "never_ran": len(never),
            "groups": gl, "headline": headline, "spool": spool,
            "user": next((t.get("user") for t in ran if t.get("user")), None), "notes": []}

