"""Recovery: what gpualert does (or, in monitor mode, would do) after a failed run.

`on_verdict()` is the one entry point, called by the job epilog with the verdict it wrote:
attribution (the site's command), the facts from Slurm, the policy's decision (policy.py),
the audit line (fsynced before any action), the actions (actions.py). It is bounded by
recovery.timeout_s: past it the rest is abandoned, Slurm's normal handling proceeds and the
audit log says so. It never raises (the epilog must not break for it).

The job epilog calls it twice: with act=False before it sends the report (the decision is made
and recorded, so the mail can say what recovery does and why), then, after the report is safe
in the outbox, with act=True for the actions. A decision whose actions never came (the epilog
was killed) is an interrupted decision: `gpualert watch` carries it on (resume_unfinished).
"""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Mapping
from typing import Any

from gpualert_slurm.core import slurm
from gpualert_slurm.core.config import Config
from gpualert_slurm.core.verdict import VerdictRecord

SLURM_CALL_S = 5.0
LOCK_WHY = "the audit lock did not come"


def _claimed(verdict: VerdictRecord, nodes: list[str]) -> list[str]:
    """The nodes the verdict blames, whatever its evidence's origin: the root rank's node,
    else the node whose log holds the first evidence, else the job's only node. (A claim:
    the job's own text and files say so.)"""
    c = verdict.cause
    if c.root_node:
        return [c.root_node]
    efile = c.evidence[0].file if c.evidence else None
    for t in verdict.tasks:
        if efile and t.get("file") == efile and t.get("node"):
            return [str(t["node"])]
    return list(nodes) if len(nodes) == 1 else []


def _suspects(verdict: VerdictRecord, cls: str, nodes: list[str], deadline: float
              ) -> tuple[list[str], dict[str, str], dict[str, str], list[str]]:
    """(claimed, proven, refuted, notes) for the nodes Slurm says ran this attempt (`nodes`):
    what the verdict blames; node -> the Slurm or root fact that backs the class there (for
    a node failure Slurm's DOWN/NOT_RESPONDING/FAIL, else the node's sealed kernel log or
    NVML, provenance.backing); node -> why a blamed node is not backed."""
    from gpualert_slurm.core import provenance

    notes: list[str] = []
    trusted = verdict.trusted or {}
    claimed = _claimed(verdict, nodes)
    proven: dict[str, str] = {}
    refuted: dict[str, str] = {}
    states: dict[str, str] = {}
    if cls == "node_failure":
        for n in nodes:
            if time.monotonic() > deadline:
                notes.append("node states not all read within the bound")
                break
            try:
                info = slurm.node_info(n, timeout=min(SLURM_CALL_S, deadline - time.monotonic()))
            except slurm.SlurmError as e:
                notes.append(f"node {n}: {e}")
                continue
            states[n] = info.state
            if info.flags & {"DOWN", "NOT_RESPONDING", "FAIL"}:
                proven[n] = f"Slurm: {n} {info.state}"
    else:
        for n in nodes:
            b = provenance.backing(trusted, n, cls)
            if b:
                proven[n] = b
    for c in claimed:
        if c in proven:
            continue
        if cls == "node_failure" and c in nodes:
            refuted[c] = f"Slurm does not say {c} failed (its state: {states.get(c, 'unknown')})"
        else:
            refuted[c] = provenance.not_backed(trusted, c, cls)
    return claimed, proven, refuted, notes


def _breaker_facts(partition: str, deadline: float, notes: list[str]
                   ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the partition's nodes as Slurm lists them, those of them drained now by gpualert):
    the breaker counts state, per node set. () for a partition Slurm does not know."""
    from gpualert_slurm.recovery.actions import REASON_PREFIX

    if not partition:
        return (), ()
    try:
        left = min(SLURM_CALL_S, deadline - time.monotonic() - 0.5)
        node_set = tuple(slurm.partition_nodes(partition, timeout=max(0.1, left)))
    except slurm.SlurmError as e:
        notes.append(f"partition {partition}: {e}")
        return (), ()
    try:
        left = min(SLURM_CALL_S, deadline - time.monotonic() - 0.5)
        infos = slurm.nodes_info(timeout=max(0.1, left))
    except slurm.SlurmError as e:
        notes.append(f"node states: {e}; the breaker counts the audit log's drains only")
        return node_set, ()
    members = set(node_set)
    return node_set, tuple(sorted(i.name for i in infos if i.name in members and i.drained
                                  and i.reason.startswith(REASON_PREFIX)))


def _newest_match(base: str, limit: int) -> float | None:
    """Newest mtime of at most `limit` paths glob matches (lstat: no file opened)."""
    newest = None
    for i, path in enumerate(glob.iglob(base, recursive=True)):
        if i >= limit:
            break
        try:
            m = os.lstat(path).st_mtime
        except OSError:
            continue
        newest = m if newest is None else max(newest, m)
    return newest


def checkpoint_newest(pattern: str | None, work_dir: str | None, deadline: float,
                      user: str | None = None, cfg: Config | None = None) -> float | None:
    """Newest mtime of the files matching the job's checkpoint= glob (relative to its work
    dir). Root never walks it: it runs in a child as the job's user (so no link is followed
    with root's rights, and what the user cannot see does not count), killed past
    limits.checkpoint_timeout_s or the deadline (a symlink loop under `**`), and visits at
    most limits.checkpoint_max_matches paths. None: no glob, or nothing known in time."""
    if not pattern:
        return None
    from gpualert_slurm.core.artifacts import run_forked
    from gpualert_slurm.core.config import LimitsConfig

    lim = cfg.limits if cfg is not None else LimitsConfig()
    base = pattern if os.path.isabs(pattern) else os.path.join(work_dir or "/nonexistent",
                                                               pattern)
    uid = gid = None
    if user is not None and os.geteuid() == 0:  # None: an admin's own call (tests, a shell)
        import pwd

        try:
            pw = pwd.getpwnam(str(user))
        except KeyError:
            return None  # whose files these are is not known: root does not look
        uid, gid = pw.pw_uid, pw.pw_gid
    timeout = min(lim.checkpoint_timeout_s, deadline - time.monotonic() - 0.5)
    if timeout <= 0:
        return None
    try:
        got = run_forked(lambda: _newest_match(base, lim.checkpoint_max_matches), timeout,
                         uid, gid)
    except (TimeoutError, RuntimeError, OSError):
        return None
    return float(got) if isinstance(got, int | float) else None


def _summary(dec: dict[str, Any], outcome: str | None, results: list[dict[str, Any]],
             audit_file: str) -> dict[str, Any]:
    return {
        "id": dec.get("id"), "mode": dec.get("mode"), "rule": dec.get("rule"),
        "class": dec.get("class"), "shadow": dec.get("shadow"),
        "recommended": dec.get("recommended"), "planned": dec.get("planned"),
        "would": dec.get("would"), "not_taken": dec.get("not_taken"),
        "taken": [{"action": r.get("action"), "target": r.get("target"),
                   "outcome": r.get("outcome")} for r in results],
        "retries_left": dec.get("retries_left"), "notes": dec.get("notes"),
        "attribution": dec.get("attribution"), "outcome": outcome, "audit_log": audit_file,
        "not_retried": dec.get("not_retried"), "xid": dec.get("xid") or {},
    }


def on_verdict(cfg: Config, verdict: VerdictRecord | Mapping[str, Any], log: Any = None,
               deadline: float | None = None, act: bool = True) -> dict[str, Any] | None:
    """Decide (and in action mode act) on one run's verdict (a VerdictRecord, or a verdict-shaped
    mapping: the hang watcher's); the summary for the report, or None for a run that did not
    fail. act=False: decide and record only; the summary's outcome is then "planned" when
    actions wait for a later act=True call, or "undecided" when the decision lock did not come
    in time (nothing recorded: the later call decides). Never raises."""
    try:
        return _on_verdict(cfg, VerdictRecord.of(verdict), log, deadline, act)
    except Exception as e:  # fail open: the epilog and Slurm go on as if gpualert were absent
        if log is not None:
            job_id = verdict.job_id if isinstance(verdict, VerdictRecord) else verdict.get("job_id")
            log.error(f"job {job_id}: recovery failed: {e!r}")
        return {"outcome": "error", "error": repr(e)[:300]}


def _facts(cfg: Config, verdict: VerdictRecord, deadline: float) -> dict[str, Any]:
    """What the decision needs beyond the audit log: the site's attribution, the suspects,
    the partition's size, the checkpoint's progress (outside the lock: they take time)."""
    from gpualert_slurm.recovery import attribution

    rc = cfg.recovery
    job = verdict.job
    opts = verdict.options or {}
    att_timeout = max(0.1, min(rc.attribution_timeout_s, deadline - time.monotonic() - 1))
    v2, att = attribution.attribute(rc.attribution, verdict, att_timeout)
    cls = v2.cause.klass
    # Slurm's word only (docs/SECURITY.md): the job epilog put what Slurm said in "trusted";
    # a verdict without it (made up by the hang watcher) names no node that may be touched.
    sl = (verdict.trusted or {}).get("slurm") or {}
    nodes = [str(n) for n in sl.get("nodes") or []]
    partition = str(sl.get("partition") or "").split(",")[0]
    suspects, proven, refuted, notes = _suspects(v2, cls, nodes, deadline)
    # The breaker's facts bound drains, and a drain goes only to a proven node: without one
    # (a workload class, most failures) they are not asked for. Two sinfo/scontrol calls
    # each time were 4 of the ~8 slurmctld RPCs a failed job cost (bench_scale, sdiag).
    node_set, drained_now = _breaker_facts(partition, deadline, notes) if proven else ((), ())
    return {"verdict": v2, "attribution": att, "nodes": nodes, "partition": partition,
            "suspects": suspects, "proven": proven, "refuted": refuted,
            "node_set": node_set, "drained_now": drained_now, "user": str(sl.get("user") or ""),
            "notes": notes, "partition_size": len(node_set),
            "checkpoint_newest": checkpoint_newest(opts.get("checkpoint"), job.work_dir,
                                                   deadline, str(job.user or ""), cfg)}


def _on_verdict(cfg: Config, verdict: VerdictRecord, log: Any,
                deadline: float | None, act: bool = True) -> dict[str, Any] | None:
    from gpualert_slurm.recovery import actions, policy
    from gpualert_slurm.recovery.audit import AuditLog, audit_path, breaker_open, decision_state

    if not verdict.failed_or_silent:
        return None
    rc = cfg.recovery
    t0 = time.monotonic()
    deadline = min(deadline if deadline is not None else t0 + rc.timeout_s, t0 + rc.timeout_s)
    job = verdict.job
    opts = verdict.options or {}
    job_id = str(verdict.job_id)
    attempt = verdict.attempt
    audit = AuditLog(audit_path(cfg))
    dec_id = verdict.decision_id or f"{job_id}.{attempt}"
    # Decided already (by act=False before the report, or an interrupted run): the facts
    # (the site's attribution command among them) are not gathered again.
    known = act and decision_state(audit.read(), dec_id)[0] is not None
    f = None if known else _facts(cfg, verdict, deadline)

    with audit.locked(max(0.1, deadline - time.monotonic() - 0.5)) as held:
        if not held and not act:  # the act=True call after the report decides
            return {"outcome": "undecided", "why": LOCK_WHY + " before the report"}
        if not held:
            rec = audit.append({"event": "outcome", "id": dec_id, "job": job_id,
                                "attempt": attempt, "outcome": "abandoned",
                                "why": f"{LOCK_WHY} within the bound (gpualert watch "
                                       "decides it later)"})
            return {"id": rec["id"], "outcome": "abandoned", "why": rec["why"]}
        records = audit.read()
        old, done, outcome = decision_state(records, dec_id)
        if old is not None and outcome is not None:
            # the same decision again (the epilog ran twice): recorded, never acted on twice
            return {**_summary(old, outcome, [], audit.path), "repeat": True}
        done_now: list[dict[str, Any]] = []
        if old is None:
            if f is None:  # seen before the lock, gone from the log's tail since: rare
                f = _facts(cfg, verdict, deadline)
            v2, partition, nodes = f["verdict"], f["partition"], f["nodes"]
            suspects, notes, vv = f["suspects"], f["notes"], f["verdict"].cause
            facts = policy.JobFacts(
                job_id=job_id, attempt=attempt, partition=partition, nodes=tuple(nodes),
                suspects=tuple(suspects), recover=opts.get("recover"),
                checkpoint=opts.get("checkpoint"), checkpoint_newest=f["checkpoint_newest"],
                partition_size=f["partition_size"],
                breaker_open=breaker_open(records, partition, f["node_set"]) is not None,
                time=time.time(), proven=tuple(f["proven"].items()),
                refuted=tuple(f["refuted"].items()), user=f["user"], node_set=f["node_set"],
                drained_now=f["drained_now"])
            d = policy.decide(rc, v2, facts, records)
            d.id = dec_id
            first = vv.evidence[0].text if vv.evidence else None
            evidence = str(first or vv.detail or "")[:300]
            # nothing to do (monitor mode, shadow, a workload class...): the decision and its
            # outcome in one write, one fsync, while the lock is held
            done_now = [] if d.planned else [{
                "event": "outcome", "id": dec_id, "job": job_id, "attempt": attempt,
                "outcome": "recorded", "decided_s": time.monotonic() - t0}]
            old = audit.append({
                "event": "decision", **d.to_json(), "partition": partition, "nodes": nodes,
                "user": f["user"] or job.user,
                # suspects: the nodes Slurm or root facts blame, else the verdict's claim;
                # claimed: what the job's own text and files said (explanation only)
                "suspects": d.trusted_suspects or suspects, "claimed": suspects,
                "evidence": evidence,
                "failed_at": job.end_time, "checkpoint": opts.get("checkpoint"),
                "attribution": f["attribution"], "notes": [*d.notes, *notes],
                "user_recover": opts.get("recover"),
                "not_retried": policy.not_retried(rc, d)}, *done_now)
            if d.trip_breaker:
                audit.append({"event": "breaker", "partition": partition, "state": "open",
                              "node_set": list(f["node_set"]),
                              "id": dec_id, "why": next(
                                  (n["why"] for n in d.not_taken if "breaker" in n["why"]), "")})
        if not old.get("planned"):
            if outcome is None and not done_now:  # an interrupted decision with nothing to do
                audit.append({"event": "outcome", "id": dec_id, "job": job_id,
                              "attempt": attempt, "outcome": "recorded",
                              "decided_s": time.monotonic() - t0})
            return _summary(old, "recorded", [], audit.path)
        if not act:
            return _summary(old, "planned", [], audit.path)
        out, results = actions.execute(old, old["planned"], audit, deadline, done)
        audit.append({"event": "outcome", "id": dec_id, "job": job_id, "attempt": attempt,
                      "outcome": out, "decided_s": time.monotonic() - t0})
        if log is not None:
            log.info(f"job {job_id}: recovery {old.get('rule')}: "
                     + ", ".join(f"{r['action']} {r['target']}: {r['outcome']}" for r in results))
        return _summary(old, out, results, audit.path)


def _resume_decision(cfg: Config, dec: dict[str, Any], log: Any) -> dict[str, Any]:
    """Carry on an interrupted decision from its audit record alone (root's file): the
    actions it planned, from Slurm's current state, skipping those already done. Nothing a
    user can write (verdict.json, job.json) is read: it could name another job or node."""
    from gpualert_slurm.recovery import actions
    from gpualert_slurm.recovery.audit import AuditLog, audit_path, decision_state

    t0 = time.monotonic()
    deadline = t0 + cfg.recovery.timeout_s
    audit = AuditLog(audit_path(cfg))
    did, job, attempt = str(dec.get("id")), dec.get("job"), dec.get("attempt")
    with audit.locked(max(0.1, deadline - time.monotonic() - 0.5)) as held:
        if not held:
            return {"id": did, "outcome": "undecided", "why": LOCK_WHY + " (the next pass)"}
        old, done, outcome = decision_state(audit.read(), did)
        if old is None or outcome is not None:  # finished meanwhile
            return {"id": did, "outcome": outcome or "gone", "repeat": True}
        if not old.get("planned"):
            audit.append({"event": "outcome", "id": did, "job": job, "attempt": attempt,
                          "outcome": "recorded", "decided_s": time.monotonic() - t0})
            return _summary(old, "recorded", [], audit.path)
        out, results = actions.execute(old, old["planned"], audit, deadline, done)
        audit.append({"event": "outcome", "id": did, "job": job, "attempt": attempt,
                      "outcome": out, "decided_s": time.monotonic() - t0, "resumed": True})
        if log is not None:
            log.info(f"job {job}: resumed recovery {old.get('rule')}: "
                     + ", ".join(f"{r['action']} {r['target']}: {r['outcome']}" for r in results))
        return _summary(old, out, results, audit.path)


def resume_unfinished(cfg: Config, log: Any = None, min_age_s: float | None = None,
                      max_age_s: float = 3600) -> list[dict[str, Any]]:
    """Finish decisions a crash interrupted (a decision line without its outcome, older than
    the bound): each is carried on from its audit record and Slurm's current state, so what
    was done is not done again, and nothing in the user's directory is read. Also make, late
    (within 10 minutes), the decisions a burst left undone (the audit lock did not come
    within the epilog's bound), from the verdict.json root wrote (core.verdict.read_run).
    `gpualert
    watch` calls this every pass."""
    from gpualert_slurm.core.verdict import read_run
    from gpualert_slurm.recovery.audit import AuditLog, audit_path

    audit = AuditLog(audit_path(cfg))
    recs = audit.read()
    ended = {r.get("id") for r in recs if r.get("event") == "outcome"}
    decided = {r.get("id") for r in recs if r.get("event") == "decision"}
    age = 2 * cfg.recovery.timeout_s if min_age_s is None else min_age_s
    now = time.time()
    out = []
    # decisions never made: the audit lock did not come in time (a burst of failures)
    last_lock_abandon: dict[str, dict[str, Any]] = {}
    for r in recs:
        if r.get("event") == "outcome" and r.get("id") not in decided:
            if r.get("outcome") == "abandoned" and LOCK_WHY in str(r.get("why")):
                last_lock_abandon[str(r.get("id"))] = {**r, "event": "decision"}
            else:
                last_lock_abandon.pop(str(r.get("id")), None)
    for r in [*recs, *last_lock_abandon.values()]:
        if r.get("event") != "decision" or (r.get("id") in ended
                                             and r.get("id") not in last_lock_abandon):
            continue
        # a decision never made is made late only within 10 minutes of the failure
        limit = min(max_age_s, 600) if r.get("id") in last_lock_abandon else max_age_s
        if not age <= now - float(r.get("time") or 0) <= limit:
            continue
        if r.get("id") not in last_lock_abandon:
            out.append(_resume_decision(cfg, r, log))
            continue
        if r.get("id") != f"{r.get('job')}.{r.get('attempt')}":
            continue  # a hang decision: its verdict was made up by the watcher, not kept
        try:
            verdict = read_run(cfg.spool, str(r["job"]), int(r["attempt"]))
        except (OSError, ValueError, TypeError) as e:
            audit.append({"event": "outcome", "id": r["id"], "job": r.get("job"),
                          "attempt": r.get("attempt"), "outcome": "abandoned",
                          "why": f"never decided, and root's verdict cannot be read: {e}"})
            continue
        out.append(on_verdict(cfg, verdict, log) or {})
    return out
