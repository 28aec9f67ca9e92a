"""Reports that a killed job epilog left unfinished (watchdog, shim, an overloaded controller):
each job epilog leaves a marker under <spool>/.gpualert/pending/ until its report is handled,
and one with time to spare finishes the reports of markers left behind (bounded tries)."""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import suppress
from typing import Any

from gpualert_slurm.core.config import Config
from gpualert_slurm.core.spool import SpoolError, opened_dir, read_json_nofollow, write_json_atomic
from gpualert_slurm.core.verdict import read_at
from gpualert_slurm.hooks.common import HookLog
from gpualert_slurm.hooks.job_epilog.context import Budget, JobEpilog
from gpualert_slurm.hooks.job_epilog.delivery import fallback_report, send_job, should_send
from gpualert_slurm.hooks.job_epilog.state import STATE_DIR, Locked, state_dir
from gpualert_slurm.hooks.jobspool import close_task_logs, job_options, job_spool, open_task_logs

PENDING_AFTER_S = 90.0  # older than any job epilog can run: its writer is gone
PENDING_TRIES = 3
PENDING_MAX_AGE_S = 86400.0


def mark_pending(ctx: JobEpilog) -> bool:
    """<spool>/.gpualert/pending/<jobid>.json, root's: removed once the report is handled.
    One left behind means this epilog was killed (watchdog, shim, overload): a later job
    epilog with time to spare finishes the report (sweep_pending)."""
    keep = ("SLURM_JOB_ID", "SLURM_JOB_USER", "SLURM_JOB_UID", "SLURM_JOB_NAME",
            "SLURM_JOB_EXIT_CODE2", "SLURM_JOB_EXIT_CODE", "SLURM_JOB_NODELIST",
            "SLURM_JOB_WORK_DIR", "SLURM_JOB_PARTITION", "SPANK_GPUALERT",
            "SLURM_JOB_MAIL_USER", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID")
    cfg, jobid, env, js = ctx.cfg, ctx.jobid, ctx.env, ctx.spool
    uid, attempt = js.uid, js.attempt
    try:
        d = state_dir(cfg, "pending")
        with Locked(d, jobid) as lk:
            lk.state = {"job_id": jobid, "uid": uid, "attempt": attempt, "since": time.time(),
                        "tries": 0, "env": {k: env[k] for k in keep if k in env}}
            lk.save()
        return True
    except OSError as e:
        ctx.log.error(f"job {jobid}: pending marker: {e}")
        return False


def clear_pending(cfg: Config, jobid: str) -> None:
    d = os.path.join(cfg.spool, STATE_DIR, "pending")
    for suffix in (".json", ".lock"):
        with suppress(OSError):
            os.unlink(os.path.join(d, jobid + suffix))


def sweep_pending(cfg: Config, log: HookLog, deadline: float, limit: int = 3) -> int:
    """Finish up to `limit` reports left by killed job epilogs (markers older than
    PENDING_AFTER_S), each tried at most PENDING_TRIES times and for a day at most: never
    retried for ever. Returns how many were handled."""
    d = os.path.join(cfg.spool, STATE_DIR, "pending")
    try:
        names = sorted(n[:-5] for n in os.listdir(d) if n.endswith(".json"))
    except OSError:
        return 0
    done = 0
    now = time.time()
    for jobid in names:
        if done >= limit or time.monotonic() > deadline:
            break
        if not jobid.isdigit():
            continue
        try:
            fd = os.open(os.path.join(d, jobid + ".lock"),
                         os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # another sweeper (or the epilog itself) has it
            with opened_dir(d) as dfd:
                try:
                    m = read_json_nofollow(jobid + ".json", dfd, owners=(0,))
                except (OSError, SpoolError):
                    continue
                if now - float(m.get("since", now)) < PENDING_AFTER_S:
                    continue
                m["tries"] = int(m.get("tries", 0)) + 1
                if m["tries"] > PENDING_TRIES or now - float(m["since"]) > PENDING_MAX_AGE_S:
                    log.error(f"job {jobid}: report given up after {m['tries'] - 1} tries")
                    clear_pending(cfg, jobid)
                    continue
                write_json_atomic(dfd, jobid + ".json", m, 0o600)
            _finish_pending(cfg, m, log, deadline)
            clear_pending(cfg, jobid)
            done += 1
        finally:
            os.close(fd)
    return done


def _finish_pending(cfg: Config, m: dict[str, Any], log: HookLog, deadline: float) -> None:
    """The report of one job whose epilog was killed: from its verdict.json if that was
    written, else the least report."""
    env = dict(m.get("env") or {})
    jobid = str(m["job_id"])
    env["SLURM_JOB_ID"] = jobid
    opts = job_options(env, cfg, log)
    ctx = JobEpilog(cfg, opts, env, log, Budget.until(deadline))
    with job_spool(cfg.spool, jobid, int(m["uid"]), int(m.get("attempt", 0))) as js:
        ctx.js = js
        ctx.tasks = open_task_logs(js)
        try:
            try:
                v = read_at(js.attempt_fd).to_json()  # root's, checked as core.verdict reads
            except (FileNotFoundError, SpoolError):
                v = None
            if isinstance(v, dict) and "report" in v:
                return
            if not isinstance(v, dict):
                fallback_report(ctx, RuntimeError("the job epilog was cut short"))
                return
            v.setdefault("notes", []).append(
                "this report was finished later: the job epilog that began it ran out of time")
            is_array = (v.get("array") or {}).get("task_id") is not None
            if should_send(opts, v) and (not is_array or ctx.rc.arrays == "per_task"):
                send_job(ctx, v)
                log.info(f"job {jobid}: report finished by a later job epilog")
        finally:
            close_task_logs(ctx.tasks)
