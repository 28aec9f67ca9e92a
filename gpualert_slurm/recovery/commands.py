"""`gpualert history`, `gpualert resume` and `gpualert status`: what recovery did, undoing
gpualert's own drains, and the jobs watched now. Admin commands (the audit log is root's)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from gpualert_slurm.core import slurm
from gpualert_slurm.core.config import Config, ConfigError, load_config
from gpualert_slurm.core.vocab import Action
from gpualert_slurm.recovery.actions import REASON_PREFIX
from gpualert_slurm.recovery.audit import AuditLog, audit_path, open_breakers


def _config(path: str | None) -> Config:
    try:
        return load_config(path)
    except ConfigError as e:
        print(e, file=sys.stderr)
        raise SystemExit(2) from None


def _records(cfg: Config) -> list[dict[str, Any]]:
    try:
        return AuditLog(audit_path(cfg)).read(tail_bytes=None)
    except PermissionError:
        print(f"gpualert: cannot read {audit_path(cfg)}: the audit log is root's (run as root)",
              file=sys.stderr)
        raise SystemExit(2) from None


def decisions(records: list[dict[str, Any]], job: str | None = None) -> list[dict[str, Any]]:
    """One entry per decision: the decision record with its results and outcome attached."""
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        did = r.get("id")
        if not did or (job is not None and str(r.get("job")) != job):
            continue
        ev = r.get("event")
        if ev == "decision":
            out.setdefault(did, {**r, "results": [], "outcome": None})
        elif did in out and ev == "result":
            out[did]["results"].append(r)
        elif did in out and ev == "outcome":
            out[did]["outcome"] = r.get("outcome")
    return list(out.values())


def _ts(t: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(t)))
    except (TypeError, ValueError):
        return "?"


def describe(d: dict[str, Any]) -> str:
    acts = [f"{p['action']} {p['target']}" + (" (excluding " + ",".join(d.get("exclude") or [])
                                              + ")" if p["action"] == Action.REQUEUE
                                              and d.get("exclude") else "")
            for p in (d.get("planned") or [])]
    lines = [f"{_ts(d.get('time'))}  job {d.get('job')} attempt {d.get('attempt')}  "
             f"{d.get('class')} on {','.join(d.get('suspects') or []) or '-'}  "
             f"rule {d.get('rule')}  mode {d.get('mode')}  outcome {d.get('outcome')}"]
    if d.get("evidence"):
        lines.append(f"    evidence: {d['evidence'][:160]}")
    lines.append(f"    recommended: {', '.join(d.get('recommended') or []) or 'nothing'}")
    if acts:
        lines.append(f"    planned: {'; '.join(acts)}")
    for r in d.get("results") or []:
        why = r.get("why") or r.get("detail") or ""
        lines.append(f"    {r.get('action')} {r.get('target')}: {r.get('outcome')}"
                     + (f" ({why})" if why else ""))
    for n in d.get("not_taken") or []:
        tgt = f" {n['target']}" if n.get("target") else ""
        lines.append(f"    not taken: {n.get('action')}{tgt}: {n.get('why')}")
    att = d.get("attribution") or {}
    if att.get("status") not in (None, "none"):
        lines.append(f"    attribution command: {att.get('status')}"
                     + (f" ({att.get('detail')})" if att.get("detail") else "")
                     + (f" changed {att.get('changed')}" if att.get("changed") else ""))
    for n in d.get("notes") or []:
        lines.append(f"    note: {n}")
    return "\n".join(lines)


def history_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="gpualert history",
                                 description="What recovery decided and did (the audit log).")
    ap.add_argument("--job", help="only this job id")
    ap.add_argument("--json", action="store_true", help="the decisions as JSON")
    ap.add_argument("--config", help="config file (default $GPUALERT_CONFIG or /etc/gpualert)")
    a = ap.parse_args(argv)
    cfg = _config(a.config)
    ds = decisions(_records(cfg), a.job)
    if a.json:
        print(json.dumps(ds, indent=1, sort_keys=True, default=str))
    elif not ds:
        print("no recovery decisions" + (f" for job {a.job}" if a.job else "")
              + f" in {audit_path(cfg)}")
    else:
        print("\n".join(describe(d) for d in ds))
    return 0


def resume_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="gpualert resume",
        description="Resume nodes gpualert drained (never another tool's or an admin's "
                    "drain), or reset the drain circuit breaker.")
    ap.add_argument("nodes", nargs="*", help="node names")
    ap.add_argument("--breaker", nargs="?", const="*", metavar="PARTITION",
                    help="reset the drain circuit breaker (of PARTITION, default all)")
    ap.add_argument("--config")
    a = ap.parse_args(argv)
    if not a.nodes and a.breaker is None:
        ap.error("name a node, or --breaker")
    cfg = _config(a.config)
    audit = AuditLog(audit_path(cfg))
    rc = 0
    if a.breaker is not None:
        opened = open_breakers(audit.read())
        parts = list(opened) if a.breaker == "*" else [a.breaker]
        for p in parts:
            audit.append({"event": "breaker", "partition": p, "state": "reset",
                          "by": os.environ.get("SUDO_USER") or os.environ.get("USER", "?")})
            print(f"breaker of partition {p}: reset" + ("" if p in opened else
                                                         " (it was not open)"))
        if not parts:
            print("no circuit breaker is open")
    for node in a.nodes:
        try:
            info = slurm.node_info(node)
        except slurm.SlurmError as e:
            print(f"gpualert: {node}: {e}", file=sys.stderr)
            rc = 1
            continue
        if not info.drained:
            print(f"{node}: not drained ({info.state}); nothing to do")
            continue
        if not info.reason.startswith(REASON_PREFIX):
            print(f"gpualert: {node}: drained by someone else ({info.reason or 'no reason'}): "
                  "gpualert resumes only its own drains; use scontrol if you mean it",
                  file=sys.stderr)
            rc = 1
            continue
        audit.append({"event": "resume", "target": node,
                      "before": {"state": info.state, "reason": info.reason}})
        try:
            slurm.update_node(node, "resume")
        except slurm.SlurmError as e:
            print(f"gpualert: {node}: {e}", file=sys.stderr)
            rc = 1
            continue
        print(f"{node}: resumed (was: {info.reason})")
    return rc


def rank_silence(spool: str, job_id: str, now: float, attempt: int | None = None,
                 user: str | None = None) -> dict[str, float]:
    """'<step>.<rank>' -> seconds since that task's log last grew (its mtime: the tap's
    heartbeat), for the running tasks of the job's attempt (Slurm's restart count). Read the
    way `gpualert watch` reads it (watch.heartbeats: by fds, no link followed, bounded), in
    a thread bounded like one of its jobs: a user's directory never stalls or misleads
    this command."""
    import pwd
    import threading

    from gpualert_slurm.recovery.watch import heartbeats

    try:
        uid = pwd.getpwnam(user).pw_uid if user else None
    except KeyError:
        return {}
    box: dict[str, dict[str, float]] = {}

    def work() -> None:
        try:
            _, beats = heartbeats(spool, job_id, now, attempt=attempt, uid=uid)
            box["ok"] = {k: round(b["silence_s"], 1) for k, b in beats.items()}
        except (OSError, ValueError):
            box["ok"] = {}

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(5.0)
    return box.get("ok", {})


def status_data(cfg: Config) -> dict[str, Any]:
    now = time.time()
    recs = AuditLog(audit_path(cfg)).read()
    last: dict[str, dict[str, Any]] = {}
    for d in decisions(recs):
        last[str(d.get("job"))] = d
    jobs = []
    try:
        queue = slurm.queue()
    except slurm.SlurmError as e:
        queue = []
        print(f"gpualert: squeue: {e}", file=sys.stderr)
    for j in queue:
        jid = str(j.job_id)
        if not os.path.isdir(os.path.join(cfg.spool, jid)):
            continue  # not monitored (no spool dir)
        prior = last.get(jid)
        if j.state == "RUNNING":
            state = "monitoring"
        elif j.state == "PENDING" and (j.restarts or prior):
            state = "recovering"
        elif j.state == "PENDING":
            state = "pending"
        else:
            state = j.state.lower()
        jobs.append({"job": jid, "name": j.name, "user": j.user, "slurm_state": j.state,
                     "state": state, "attempt": j.restarts, "nodes": list(j.nodes),
                     "retries_left": max(0, cfg.recovery.max_retries - j.restarts),
                     "silence_s": rank_silence(cfg.spool, jid, now, j.restarts, j.user)
                     if j.state == "RUNNING" else {},
                     "last_decision": _brief(prior)})
    queued = {j["job"] for j in jobs}
    recent = [{"job": jid, "state": "stopped" if d.get("outcome") == "recorded"
               or not any(p["action"] == Action.REQUEUE for p in d.get("planned") or [])
               else "completed", "last_decision": _brief(d)}
              for jid, d in last.items() if jid not in queued
              and now - float(d.get("time") or 0) < 86400]
    flagged = sorted({n for d in decisions(recs) if now - float(d.get("time") or 0) < 86400
                      for n in d.get("flagged_nodes") or []})
    return {"mode": cfg.recovery.mode, "partitions": dict(cfg.recovery.partitions),
            "jobs": jobs, "recent": recent,
            "breakers": {p: {"since": b.get("time"), "why": b.get("why")}
                         for p, b in open_breakers(recs).items()},
            "flagged_nodes": flagged, "audit_log": audit_path(cfg)}


def _brief(d: dict[str, Any] | None) -> dict[str, Any] | None:
    if not d:
        return None
    return {"id": d.get("id"), "time": d.get("time"), "class": d.get("class"),
            "rule": d.get("rule"), "mode": d.get("mode"), "outcome": d.get("outcome"),
            "planned": d.get("planned"), "would": d.get("would"),
            "not_taken": d.get("not_taken")}


def status_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="gpualert status",
                                 description="Monitored jobs now, recovery's last decisions, "
                                             "open circuit breakers.")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--config")
    a = ap.parse_args(argv)
    cfg = _config(a.config)
    data = status_data(cfg)
    if a.json:
        print(json.dumps(data, indent=1, sort_keys=True, default=str))
        return 0
    print(f"recovery mode: {data['mode']}"
          + (f" (partitions: {data['partitions']})" if data["partitions"] else ""))
    for p, b in data["breakers"].items():
        print(f"CIRCUIT BREAKER OPEN for partition {p} since {_ts(b['since'])}: {b['why']} "
              "(`gpualert resume --breaker` resets it)")
    if data["flagged_nodes"]:
        print(f"nodes flagged for the admin: {', '.join(data['flagged_nodes'])}")
    if not data["jobs"]:
        print("no monitored job in the queue")
    for j in data["jobs"]:
        d = j["last_decision"]
        print(f"job {j['job']} ({j['name']}, {j['user']}): {j['state']}, attempt {j['attempt']}, "
              f"retries left {j['retries_left']}"
              + (f", last decision {d['class']} -> {d['outcome']}" if d else ""))
        if j["silence_s"]:
            slowest = max(j["silence_s"].items(), key=lambda kv: kv[1])
            print("    seconds since last output: "
                  + ", ".join(f"rank {k} {v:g}" for k, v in j["silence_s"].items())
                  + f"  (longest: rank {slowest[0]})")
    recent = sorted(data["recent"], key=lambda r: -float(r["last_decision"]["time"] or 0))
    if len(recent) > 10:
        print(f"({len(recent) - 10} more decisions in the last day: gpualert history)")
    for r in recent[:10]:
        d = r["last_decision"]
        print(f"job {r['job']}: {r['state']} (last decision {d['class']}, rule {d['rule']}, "
              f"{d['mode']}, {d['outcome']})")
    return 0
