"""Carrying a decision out with Slurm's own commands (through gpualert_slurm.core.slurm), each step
idempotent: Slurm's current state is read first, so a decision carried out twice, or resumed
after a restart, acts once. Every step is announced in the audit log (fsynced) before it is
taken, with the state it found, and its result recorded after.

- drain_node: `scontrol update nodename=N state=drain reason="gpualert: <class> <evidence>"`,
  or for a sealed Xid the catalogue's words ("gpualert: Xid 79 (fallen off the bus): reboot");
  a node already drained by someone else (NHC:, an admin) keeps its state and reason.
- requeue [excluding nodes] [held]: requeuehold, merge ExcNodeList (it can only change on a
  pending job, and a new value replaces the old list), release unless held. A job Slurm has
  already requeued (node failure) only gets the exclusion merged.
- cancel: scancel, unless the job already ended.

Which action runs which executor is EXECUTORS, keyed by core/vocab.py's ACTION_SPECS (an
action carried by another, exclude_node and hold with the requeue, has none of its own).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from gpualert_slurm.core import slurm
from gpualert_slurm.core.vocab import ACTION_SPECS, CHECK, Action, PlannedStep, spec_of
from gpualert_slurm.recovery.audit import AuditLog

__all__ = ["ACTION_SPECS", "EXECUTORS", "execute"]

REASON_PREFIX = "gpualert:"
SLURM_CALL_S = 5.0
DONE = ("done", "already done", "kept")


ABANDON = "abandoned, Slurm's normal handling proceeds"


class OverBound(Exception):
    pass


def _timed_out(e: slurm.SlurmError) -> bool:
    return "no answer within" in str(e)


def drain_reason(cls: str, evidence: str) -> str:
    from gpualert_slurm.core.termsafe import one_line

    # The evidence may be a job's own text: no control character of it reaches sinfo's or
    # an admin's terminal (escaped); one argv element for scontrol, short, without '"'.
    text = " ".join(f"{REASON_PREFIX} {cls} {one_line(evidence, 400)}".split())
    return text.replace('"', "'")[:200]


def xid_reason(x: dict[str, Any]) -> str:
    """Slurm's Reason= for a drain the GPU fault catalogue asked for, in words NHC- and
    NVSentinel-style tools and admins read: "gpualert: Xid 79 (fallen off the bus): reboot"."""
    from gpualert_slurm.core.termsafe import one_line
    from gpualert_slurm.core.xid import BUCKET_WORDS

    words = BUCKET_WORDS.get(str(x.get("bucket")), str(x.get("bucket")))
    sub = x.get("sub") or {}
    unit = f" {sub.get('unit')} sub-code 0x{int(sub.get('sub_code') or 0):02x}" if sub else ""
    esc = f" (escalated: {x['escalated']})" if x.get("escalated") else ""
    text = f"{REASON_PREFIX} Xid {x.get('code')}{unit} ({x.get('short')}): {words}{esc}"
    return " ".join(one_line(text, 400).split()).replace('"', "'")[:200]


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0.2:
        raise OverBound()
    return min(SLURM_CALL_S, left)


def merged_exclusion(current: str, extra: list[str]) -> str:
    names = slurm.expand_hostlist(current if current not in ("(null)", "None") else "")
    for n in extra:
        if n not in names:
            names.append(n)
    return ",".join(names)


def do_drain(node: str, reason: str, deadline: float, audit: AuditLog,
             base: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    before = slurm.node_info(node, timeout=_left(deadline))
    info = {"state": before.state, "reason": before.reason}
    if before.drained:
        if before.reason.startswith(REASON_PREFIX):
            return "already done", {"before": info}
        return "kept", {"before": info, "why": f"already drained by another tool or an admin "
                        f"({before.reason or 'no reason'}): its state and reason are kept"}
    audit.append({**base, "event": "action", "action": Action.DRAIN_NODE.value, "target": node,
                  "before": info, "reason": reason})
    slurm.update_node(node, "drain", reason, timeout=_left(deadline))
    return "done", {"before": info}


def do_requeue(job: str, attempt: int, exclude: list[str], hold: bool, deadline: float,
               audit: AuditLog, base: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    st = slurm.show_job(job, timeout=_left(deadline))
    before = {"state": st.state, "restarts": st.restarts,
              "exc_node_list": st.raw.get("ExcNodeList", "")}
    if st.restarts > attempt:
        # requeued already (by Slurm for a node failure, or by this decision before a restart)
        # (a requeued job reads COMPLETING until its old run is cleaned up; it is pending
        # underneath, and its ExcNodeList can change)
        if exclude and st.state in ("PENDING", "COMPLETING"):
            new = merged_exclusion(str(st.raw.get("ExcNodeList", "")), exclude)
            if new != merged_exclusion(str(st.raw.get("ExcNodeList", "")), []):
                audit.append({**base, "event": "action", "action": Action.EXCLUDE_NODE.value,
                              "target": ",".join(exclude), "before": before})
                slurm.update_job(job, timeout=_left(deadline), ExcNodeList=new)
                return "done", {"before": before, "detail": f"already requeued (restart "
                                f"{st.restarts}); ExcNodeList={new}"}
        return "already done", {"before": before}
    if st.state == "PENDING":
        return "already done", {"before": before, "detail": "the job is pending already"}
    audit.append({**base, "event": "action", "action": Action.REQUEUE.value, "target": job,
                  "before": before, "exclude": exclude, "hold": hold})
    if exclude or hold:
        slurm.requeue(job, hold=True, timeout=_left(deadline))
        if exclude:
            cur = slurm.show_job(job, timeout=_left(deadline)).raw.get("ExcNodeList", "")
            slurm.update_job(job, timeout=_left(deadline),
                             ExcNodeList=merged_exclusion(str(cur), exclude))
        if not hold:
            slurm.release(job, timeout=_left(deadline))
    else:
        slurm.requeue(job, timeout=_left(deadline))
    return "done", {"before": before}


def do_cancel(job: str, deadline: float, audit: AuditLog, base: dict[str, Any]
              ) -> tuple[str, dict[str, Any]]:
    st = slurm.show_job(job, timeout=_left(deadline))
    before = {"state": st.state}
    if st.final or st.state == "COMPLETING":
        return "already done", {"before": before, "detail": "the job has ended"}
    audit.append({**base, "event": "action", "action": Action.CANCEL.value, "target": job,
                  "before": before})
    slurm.cancel(job, timeout=_left(deadline))
    return "done", {"before": before}


def _not_this_job(decision: dict[str, Any], deadline: float) -> str | None:
    """Why Slurm's job of this id is not the one the verdict is about (another cluster's
    scontrol: SLURM_CONF not set for the hook; the id reused), or None when it is."""
    try:
        st = slurm.show_job(str(decision["job"]), timeout=_left(deadline))
    except OverBound:
        return f"{ABANDON}: over recovery.timeout_s before anything was done"
    except slurm.SlurmError as e:
        if _timed_out(e):
            return f"{ABANDON}: Slurm did not answer within the bound ({e}); nothing done"
        return f"Slurm does not know job {decision['job']} ({e}): nothing done (is SLURM_CONF " \
               "set for the hook?)"
    user = decision.get("user")
    nodes = set(decision.get("nodes") or [])
    if user and st.user and st.user != user:
        return f"Slurm's job {st.job_id} belongs to {st.user}, not {user}: nothing done"
    if nodes and st.nodes and not set(st.nodes) <= nodes:
        return f"Slurm's job {st.job_id} ran on {st.nodelist}, not on the verdict's nodes"
    return None


# An executor: (the decision record, its step, the deadline, the audit log, the audit records'
# common fields) -> (outcome, what the result record adds).
Executor = Callable[[dict[str, Any], PlannedStep, float, AuditLog, dict[str, Any]],
                    tuple[str, dict[str, Any]]]


def _drain_step(decision: dict[str, Any], step: PlannedStep, deadline: float, audit: AuditLog,
                base: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    # the drain's reason is the Slurm or root fact that allowed it, never job text
    target = str(step["target"])
    ev = (decision.get("backing") or {}).get(target) or decision.get("evidence") or ""
    x = (decision.get("xid") or {}).get(target)
    reason = xid_reason(x) if x else drain_reason(decision["class"], ev)
    return do_drain(target, reason, deadline, audit, base)


def _requeue_step(decision: dict[str, Any], step: PlannedStep, deadline: float,
                  audit: AuditLog, base: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return do_requeue(str(decision["job"]), int(decision["attempt"]),
                      list(decision.get("exclude") or []), bool(step.get("hold")), deadline,
                      audit, base)


def _cancel_step(decision: dict[str, Any], step: PlannedStep, deadline: float,
                 audit: AuditLog, base: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return do_cancel(str(decision["job"]), deadline, audit, base)


EXECUTORS: Mapping[Action, Executor] = {
    Action.DRAIN_NODE: _drain_step,
    Action.REQUEUE: _requeue_step,
    Action.CANCEL: _cancel_step,
}  # every action not carried by another has one (tests/test_action_specs.py)


def execute(decision: dict[str, Any], planned: list[PlannedStep], audit: AuditLog,
            deadline: float, done: dict[tuple[str, str], str] | None = None,
            ) -> tuple[str, list[dict[str, Any]]]:
    """Carry out `planned` (from the decision record); skip steps whose result is already
    recorded as done. Returns (outcome, results). Past the deadline the rest is abandoned."""
    done = done or {}
    base = {"id": decision["id"], "job": decision["job"], "attempt": decision["attempt"],
            "partition": decision.get("partition", "")}
    results: list[dict[str, Any]] = []
    outcome = "completed"
    wrong = _not_this_job(decision, deadline)
    if wrong:
        res = "abandoned" if wrong.startswith(ABANDON) else "failed"
        results.append(audit.append({**base, "event": "result", "action": CHECK,
                                     "target": str(decision["job"]), "outcome": res,
                                     "why": wrong}))
        return res, results
    for p in planned:
        action, target = p["action"], str(p["target"])
        prior = done.get((action, target))
        if prior in DONE:
            results.append({"action": action, "target": target, "outcome": prior,
                            "detail": "recorded earlier"})
            continue
        spec = spec_of(action)
        run = EXECUTORS.get(spec.name) if spec else None
        try:
            if run is not None:
                res, info = run(decision, p, deadline, audit, base)
            else:
                res, info = "failed", {"why": f"no executor for {action}"}
        except OverBound:
            res, info = "abandoned", {"why": f"{ABANDON}: over recovery.timeout_s"}
            outcome = "abandoned"
        except slurm.SlurmError as e:
            if _timed_out(e):  # fail open: Slurm's normal handling proceeds
                res, info = "abandoned", {"why": f"{ABANDON}: {str(e)[:300]}"}
                outcome = "abandoned"
            else:
                res, info = "failed", {"why": str(e)[:400]}
                outcome = "failed"
        rec = audit.append({**base, "event": "result", "action": action, "target": target,
                            "outcome": res, **info})
        results.append(rec)
        if res == "abandoned":
            break
    return outcome, results
