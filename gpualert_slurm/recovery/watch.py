"""`gpualert watch`: hang detection while jobs run, from the tap's heartbeats (each task log's
mtime moves with every write).

Who watches: one process on the controller (a systemd timer runs `gpualert watch`, or a
service runs `gpualert watch --loop --interval 15`), not a watcher per job: it never outlives a
job (it only looks at jobs squeue says are RUNNING), it costs nothing on the compute nodes
(an squeue and a few stat() of the shared spool per pass on the controller), and its crash or
hang touches no job (it only reads mtimes and the last lines of logs, as root).

Per running job that asked for hang= (or with the config's hang:), in its current attempt:
- every rank silent for at least hang -> "hung": an alert mail while the job still runs (the
  last lines of each rank), then the recovery policy's decision for class `hang`
  (recovery.rules.hang: notify only by default; action mode may cancel or requeue it);
- one or more ranks silent for at least hang while another wrote within it -> "straggler":
  an alert naming those ranks.
Each alert is sent once per job attempt, the attempt being Slurm's restart count (an
attempt-N directory a user makes is no run), at most limits.watch_alerts_per_job per job and
limits.watch_alerts_per_user_hour per user (state in <spool>/.gpualert/watch.json, root's).
Each pass also finishes recovery decisions a crash interrupted (recovery.resume_unfinished),
from the root-only audit log alone.

Everything it reads in a job's directory is the user's: it is read from the spool root down
by fds, no link followed, non-blocking, owner- and type-checked, at most MAX_TASK_ENTRIES
names, and each job's reads run in a thread bounded by limits.watch_job_s; a job that fails
any of it is logged and skipped, and the pass goes on (docs/SECURITY.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import threading
import time
from typing import Any

from gpualert_slurm.core import slurm
from gpualert_slurm.core.config import Config, ConfigError, bound_options, load_config
from gpualert_slurm.core.options import OptionError, parse_options
from gpualert_slurm.core.spool import (
    SpoolError,
    open_attempt,
    open_dir,
    open_nofollow_checked,
    read_job_file,
    write_json_atomic,
)
from gpualert_slurm.core.termsafe import escape

TAIL_BYTES = 4096
TAIL_LINES = 8
MAX_TASK_ENTRIES = 4096  # names read from one tasks/ dir per pass (a user can make millions)
MAX_ALERT_RANKS = 64  # ranks whose last lines an alert quotes
_LOG_RE = re.compile(r"^([A-Za-z0-9_-]+)\.(\d+)\.log\Z")
_stuck: dict[str, threading.Thread] = {}  # job -> its reader, still blocked from a pass


def _tail(fd: int, size: int, n: int = TAIL_LINES) -> list[str]:
    """The last lines of an open log (pread on the checked fd: nothing reopened by name)."""
    data = os.pread(fd, TAIL_BYTES, max(0, size - TAIL_BYTES)).replace(b"\0", b"")
    lines = data.decode(errors="replace").splitlines()
    return [escape(ln[:300], keep_newlines=False) for ln in lines[-n:]]


def heartbeats(spool: str, job_id: str, start: float, attempt: int | None = None,
               uid: int | None = None, tails: bool = False
               ) -> tuple[int, dict[str, dict[str, Any]]]:
    """(attempt, '<step>.<rank>' -> {"silence_s", "file"[, "tail"]}) for one attempt (Slurm's
    restart count; None: the latest there is); a rank's log that was never written counts from
    the attempt's start. Read as root reads a user's directory: from the spool root down by
    fds, no link followed (a tasks/ that is a symlink to another job's is refused), each log
    opened O_NOFOLLOW|O_NONBLOCK and checked (a plain file of the job's user, one link),
    at most MAX_TASK_ENTRIES names. uid: the job's user (Slurm's), whom the dirs must belong to.
    SpoolError/OSError when the job dir cannot be read that way."""
    out: dict[str, dict[str, Any]] = {}
    d = open_attempt(spool, job_id, uid, None if attempt is None else int(attempt))
    fds = [d.fd] if d.attempt_fd == d.fd else [d.fd, d.attempt_fd]
    try:
        owner = os.fstat(d.fd).st_uid
        att, tasks_path = d.attempt, os.path.join(d.attempt_path, "tasks")
        try:
            fds.append(open_dir("tasks", d.attempt_fd, shown=tasks_path))
        except FileNotFoundError:
            return att, {}
        if os.fstat(fds[-1]).st_uid not in (owner, 0):
            raise SpoolError(f"{tasks_path}: not owned by uid {owner}: refused")
        tfd = fds[-1]
        names: set[str] = set()
        with os.scandir(tfd) as it:
            for i, entry in enumerate(it):
                if i >= MAX_TASK_ENTRIES:
                    break
                names.add(entry.name)
        now = time.time()
        for name in sorted(names):
            m = _LOG_RE.match(name)
            if not m or f"{name[:-4]}.exit" in names:
                continue  # not a log, or that task has ended: silence is not a hang
            try:  # a FIFO, a directory named x.log, a hard link, a link: not a log
                fd, st = open_nofollow_checked(name, tfd, (owner, 0))
            except OSError:
                continue
            try:
                last = st.st_mtime if st.st_size else max(start, st.st_mtime)
                beat: dict[str, Any] = {"silence_s": now - last,
                                        "file": os.path.join(tasks_path, name)}
                if tails and len(out) < MAX_ALERT_RANKS:
                    beat["tail"] = _tail(fd, st.st_size)
                out[name[:-4]] = beat
            finally:
                os.close(fd)
        return att, out
    finally:
        for fd in fds:
            os.close(fd)


def judge(beats: dict[str, dict[str, Any]], hang_s: float) -> tuple[str | None, list[str]]:
    """("hung", all ranks) | ("straggler", the silent ranks) | (None, [])."""
    if any(not k.startswith("batch.") for k in beats):
        # a batch script waiting on srun prints nothing: only the steps' ranks count
        beats = {k: b for k, b in beats.items() if not k.startswith("batch.")}
    if not beats:
        return None, []
    silent = [k for k, b in beats.items() if b["silence_s"] >= hang_s]
    if not silent:
        return None, []
    if len(silent) == len(beats):
        return "hung", silent
    return "straggler", silent


def _job_record(spool: str, job_id: str, uid: int | None) -> dict[str, Any] | None:
    """job.json as the Prolog (root) wrote it; None when it is missing or not root's own file
    (a FIFO, a symlink, a file the user put there: not monitored, as far as watch goes)."""
    try:
        rec = read_job_file(spool, job_id, "job.json", job_uid=uid)
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def _job_options(cfg: Config, rec: dict[str, Any]) -> Any:
    try:
        return bound_options(parse_options(rec.get("options_raw")), cfg)
    except (OptionError, TypeError):
        return parse_options(None)


def alert_text(kind: str, job_id: str, attempt: int, ranks: list[str],
               beats: dict[str, dict[str, Any]], hang_s: float,
               site: str | None = None) -> tuple[str, str, str]:
    """(subject, text, html) of a "hung" or "straggler" alert: templates hang.* and
    straggler.* (docs/TEMPLATES.md); the tails in `beats` are termsafe-escaped already."""
    from gpualert_slurm.core.templates import render

    who = ", ".join(f"rank {r}" for r in ranks[:MAX_ALERT_RANKS])
    if len(ranks) > MAX_ALERT_RANKS:
        who += f" and {len(ranks) - MAX_ALERT_RANKS} more"
    if kind == "hung":
        subject = f"[gpualert] HUNG job {job_id}: no output from any rank for {hang_s:g} s"
    else:
        subject = f"[gpualert] STRAGGLER in job {job_id}: {who} silent for {hang_s:g} s"
    variables = {
        "job_id": job_id, "attempt": attempt, "hang_s": hang_s, "who": who,
        "beats": [{"rank": k, "silence_s": b["silence_s"], "file": b["file"],
                   "tail": list(b.get("tail") or [])}
                  for k, b in sorted(beats.items())[:MAX_ALERT_RANKS]]}
    name = "hang" if kind == "hung" else "straggler"
    return (subject, render(f"{name}.txt.j2", site, **variables),
            render(f"{name}.html.j2", site, **variables))


def _alert(cfg: Config, job: slurm.JobState, opts: Any, kind: str, ranks: list[str],
           beats: dict[str, dict[str, Any]], hang_s: float, attempt: int) -> str:
    from gpualert_slurm import notify
    from gpualert_slurm.report import build_message

    job_id = str(job.job_id)
    subject, text, html = alert_text(kind, job_id, attempt, ranks, beats, hang_s,
                                     cfg.report.templates)
    env = {"SLURM_JOB_ID": job_id, "SLURM_JOB_USER": job.user}
    rcpts = list(notify.resolve_recipients(opts, env, cfg))
    msg = build_message(subject, text, html, sender=cfg.mail.sender,
                        recipients=rcpts, job_id=job_id, job_user=job.user)
    d = notify.submit(msg, cfg=cfg, job_id=job_id, timeout_s=cfg.notify.total_timeout_s)
    return f"{getattr(d, 'status', '?')}: {getattr(d, 'reason', None) or 'ok'}"


STATE_DIR = ".gpualert"
STATE_NAME = "watch.json"


def _load_state(cfg: Config) -> dict[str, Any]:
    """watch's own state (root's, in the root-owned spool root): alerts sent, by key."""
    try:
        root_fd = open_dir(cfg.spool)
        try:
            dfd = open_dir(STATE_DIR, root_fd)
        finally:
            os.close(root_fd)
    except OSError:
        return {}
    try:
        from gpualert_slurm.core.spool import read_json_nofollow

        s = read_json_nofollow(STATE_NAME, dfd, owners=(os.geteuid(),))
        return s if isinstance(s, dict) else {}
    except (OSError, ValueError):
        return {}
    finally:
        os.close(dfd)


def _save_state(cfg: Config, state: dict[str, Any]) -> None:
    root_fd = open_dir(cfg.spool)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(STATE_DIR, 0o700, dir_fd=root_fd)
        dfd = open_dir(STATE_DIR, root_fd)
    finally:
        os.close(root_fd)
    try:
        write_json_atomic(dfd, STATE_NAME, state, 0o600)
    finally:
        os.close(dfd)


def _uid_of(user: str) -> int | None:
    import pwd

    try:
        return pwd.getpwnam(user).pw_uid
    except (KeyError, TypeError):
        return None


def _read_job(cfg: Config, job: slurm.JobState, tails: bool
              ) -> tuple[dict[str, Any] | None, int, dict[str, dict[str, Any]]]:
    """(job.json, attempt, heartbeats) of one running job: what a pass reads of it."""
    jid, uid = str(job.job_id), _uid_of(job.user)
    if uid is None:
        return None, 0, {}
    rec = _job_record(cfg.spool, jid, uid)
    if rec is None:
        return None, 0, {}
    start = rec.get("start_time")
    start = float(start) if isinstance(start, int | float) else time.time()
    att, beats = heartbeats(cfg.spool, jid, start, attempt=job.restarts, uid=uid, tails=tails)
    return rec, att, beats


def _bounded(cfg: Config, job: slurm.JobState, tails: bool, log: Any) -> Any:
    """_read_job within limits.watch_job_s, in a thread of its own: a job whose spool blocks
    (a stalled filesystem) is skipped, logged, and not read again while that read is stuck;
    any error of one job is logged and skipped, never the end of the pass."""
    jid = str(job.job_id)
    old = _stuck.get(jid)
    if old is not None and old.is_alive():
        _say(log, f"job {jid}: skipped: its spool read of an earlier pass is still blocked")
        return None
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["ok"] = _read_job(cfg, job, tails)
        except Exception as e:  # noqa: BLE001 - one job's directory must not stop watch
            box["error"] = f"{type(e).__name__}: {e}"

    t = threading.Thread(target=work, name=f"gpualert-watch-{jid}", daemon=True)
    t.start()
    t.join(cfg.limits.watch_job_s)
    if t.is_alive():
        _stuck[jid] = t
        _say(log, f"job {jid}: skipped: its spool did not answer within "
                  f"{cfg.limits.watch_job_s:g} s (limits.watch_job_s)")
        return None
    _stuck.pop(jid, None)
    if "error" in box:
        _say(log, f"job {jid}: skipped: {box['error']}")
        return None
    return box.get("ok")


def _say(log: Any, text: str) -> None:
    if log is not None:
        log.error(text)
    else:
        print(f"gpualert watch: {escape(text)}", file=sys.stderr, flush=True)


def _capped(cfg: Config, state: dict[str, Any], jid: str, user: str, now: float) -> str | None:
    """Why an alert for this job is not sent (limits.watch_alerts_per_job, per user per
    hour), or None."""
    sent = state.get("sent") or []
    lim = cfg.limits
    if sum(1 for a in sent if a.get("job") == jid) >= lim.watch_alerts_per_job:
        return (f"{lim.watch_alerts_per_job} alerts for this job already "
                "(limits.watch_alerts_per_job)")
    recent = sum(1 for a in sent if a.get("user") == user and now - float(a.get("t", 0)) < 3600)
    if recent >= lim.watch_alerts_per_user_hour:
        return (f"{lim.watch_alerts_per_user_hour} alerts for user {user} in the last hour "
                "(limits.watch_alerts_per_user_hour)")
    return None


def scan(cfg: Config, log: Any = None) -> list[dict[str, Any]]:
    """One pass over the running jobs; returns the alerts sent (or capped) in this pass."""
    from gpualert_slurm import recovery

    state = _load_state(cfg)
    raw_keys = state.get("keys")
    keys: dict[str, float] = raw_keys if isinstance(raw_keys, dict) else {}
    sent_log: list[dict[str, Any]] = [a for a in state.get("sent") or []
                                      if isinstance(a, dict)]
    state = {"keys": keys, "sent": sent_log}
    out: list[dict[str, Any]] = []
    running = [j for j in slurm.queue(timeout=10) if j.state == "RUNNING"]
    alive = {str(j.job_id) for j in running}
    for j in running:
        jid = str(j.job_id)
        got = _bounded(cfg, j, False, log)
        if not got or got[0] is None:
            continue  # not monitored, or not readable the safe way
        rec, att, beats = got
        opts = _job_options(cfg, rec)
        hang = opts.hang_s or cfg.hang_s
        if not hang:
            continue
        kind, ranks = judge(beats, float(hang))
        if kind is None:
            continue
        # the attempt is Slurm's restart count: an attempt-N dir the user makes is not a run
        key = f"{jid}.{att}.{kind}" + ("" if kind == "hung" else "." + ",".join(ranks))
        if key in keys:
            continue
        keys[key] = time.time()
        alert: dict[str, Any] = {"job": jid, "attempt": att, "kind": kind, "ranks": ranks}
        why = _capped(cfg, state, jid, j.user, time.time())
        if why:
            alert["mail"] = f"not sent: {why}"
        else:
            full = _bounded(cfg, j, True, log)
            beats = full[2] if full and full[0] is not None else beats
            alert["mail"] = _alert(cfg, j, opts, kind, ranks, beats, float(hang), att)
            sent_log.append({"job": jid, "user": j.user, "t": time.time()})
        if kind == "hung":
            worst = max(beats.values(), key=lambda b: b["silence_s"])
            # every fact here is Slurm's (nodes, partition, user, attempt) or root's
            v = {"job_id": jid, "attempt": att, "failed": True, "decision_id": f"{jid}.{att}.hang",
                 "job": {"nodes": list(j.nodes), "partition": j.partition, "user": j.user,
                         "work_dir": rec.get("work_dir"), "end_time": time.time()},
                 "options": opts.to_json(),
                 "verdict": {"class": "hang", "domain": "unknown", "root_node": None,
                             "evidence": [{"file": worst["file"], "line": None, "text":
                                           f"no output from any rank for {hang} s"}]}}
            alert["recovery"] = recovery.on_verdict(cfg, v, log)
        out.append(alert)
    # forget jobs that are gone; the per-user log keeps the last hour
    now = time.time()
    state["keys"] = {k: t for k, t in keys.items() if k.split(".")[0] in alive}
    state["sent"] = [a for a in sent_log if a.get("job") in alive
                     or now - float(a.get("t", 0)) < 3600]
    _save_state(cfg, state)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="gpualert watch", description=__doc__.splitlines()[0])
    ap.add_argument("--loop", action="store_true", help="keep scanning (a service)")
    ap.add_argument("--interval", type=float, default=15.0, help="seconds between passes")
    ap.add_argument("--config")
    a = ap.parse_args(argv)
    try:
        cfg = load_config(a.config)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2
    from gpualert_slurm.recovery import resume_unfinished

    while True:
        t0 = time.monotonic()
        try:
            for s in scan(cfg):
                print(json.dumps(s, default=str), flush=True)
            for r in resume_unfinished(cfg):
                print(json.dumps({"resumed": r}, default=str), flush=True)
        except slurm.SlurmError as e:  # Slurm busy or down: the next pass tries again
            print(f"gpualert watch: {e}", file=sys.stderr, flush=True)
        except Exception as e:  # noqa: BLE001 - a service: a bad pass is logged, not fatal
            print(f"gpualert watch: pass failed: {type(e).__name__}: {escape(str(e))}",
                  file=sys.stderr, flush=True)
        if not a.loop:
            return 0
        time.sleep(max(0.5, a.interval - (time.monotonic() - t0)))
