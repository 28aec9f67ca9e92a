"""The array tasks the hook queue's worker records itself (hooks/queue.py): an array's one
summary goes out when its last task is recorded in the array's state
(<spool>/.gpualert/arrays/<id>.json, hooks/job_epilog/arrays.py). A task whose job epilog was
cut short at its bound, or for which slurmctld ran none, would hold the summary back for
ever; the worker records such a task as unclassified (failed by its exit code), in a forked
child of its own, so that the summary still goes out and says so.

The job epilog's package is imported only here, in those children: the worker itself may
serve only Prologs, whose jobs wait on its start (hooks/queue.py).
"""

from __future__ import annotations

import os
import time
from typing import Any

from gpualert_slurm.core.config import Config, ConfigError, load_config
from gpualert_slurm.core.slurm_records import FINAL_STATES
from gpualert_slurm.core.spool import SpoolError, read_json_nofollow
from gpualert_slurm.hooks import array_acct
from gpualert_slurm.hooks.common import DEFAULT_TIMEOUT_S, HookLog, Watchdog, load_config_logged
from gpualert_slurm.hooks.jobspool import job_options

EXIT_NOT_YET = 76      # settle_array's child: the array cannot be settled yet


def _read_state(env: dict[str, str]) -> Any:
    """The array's state file, parsed (raises as its readers do)."""
    spool = load_config(env.get("GPUALERT_CONFIG") or None).spool
    dfd = os.open(os.path.join(spool, ".gpualert", "arrays"),
                  os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        return read_json_nofollow(f"{env.get('SLURM_ARRAY_JOB_ID', '')}.json", dfd,
                                  owners=(0, os.geteuid()))
    finally:
        os.close(dfd)


def task_recorded(env: dict[str, str]) -> bool | None:
    """Whether the array's state holds this task's record (not just its in-flight mark);
    None when the job is no array task or its state cannot be read."""
    array_id, task_id = env.get("SLURM_ARRAY_JOB_ID", ""), env.get("SLURM_ARRAY_TASK_ID", "")
    if not (array_id.isdigit() and task_id.isdigit()):
        return None
    try:
        st = _read_state(env)
    except FileNotFoundError:
        return False
    except (OSError, SpoolError, ConfigError, ValueError):
        return None
    rec = (st.get("tasks") or {}).get(task_id) if isinstance(st, dict) else None
    return isinstance(rec, dict) and not rec.get("in_flight")


def array_state(env: dict[str, str]) -> dict[str, Any] | None:
    """The array's state (root's, <spool>/.gpualert/arrays/<id>.json) read without its lock;
    {} when there is none yet, None when it cannot be read."""
    try:
        st = _read_state(env)
    except FileNotFoundError:
        return {}
    except (OSError, SpoolError, ConfigError, ValueError):
        return None
    return st if isinstance(st, dict) else None


def finish_array_task(env: dict[str, str], why: str) -> None:
    """After a cut-short job epilog: an array task it did not record is recorded now."""
    if task_recorded(env) is False:
        record_unclassified(env, why)


def record_unclassified(env: dict[str, str], why: str) -> None:
    """An array task whose job epilog was cut short: recorded in the array's state as failed
    (by its exit code) and unclassified, and the array's summary sent if it was the last one.
    In a forked child (the job's environment, its own bound)."""
    log = HookLog("epilog-slurmctld")
    Watchdog(log, DEFAULT_TIMEOUT_S)
    cfg = load_config_logged(log)
    if cfg is None:
        return
    log.set_spool(cfg.spool)
    _record(cfg, env, unclassified_verdict(env, why), log, why)


def _record(cfg: Config, env: dict[str, str], v: dict[str, Any], log: HookLog,
            why: str) -> None:
    """One task's record in its array's state (the job epilog's own array_step: exactly one
    task sends the summary), and the summary when it is the last."""
    # Here, not at the top: the worker that imports this module may serve only Prologs, and
    # the job epilog's package (the classifier, the report, mail) is most of a cold start.
    from gpualert_slurm.hooks.job_epilog.arrays import array_step
    from gpualert_slurm.hooks.job_epilog.context import Budget, JobEpilog
    from gpualert_slurm.hooks.job_epilog.delivery import send_array

    jobid, array_id, task_id = (env.get("SLURM_JOB_ID", "?"), env["SLURM_ARRAY_JOB_ID"],
                                env["SLURM_ARRAY_TASK_ID"])
    ctx = JobEpilog(cfg=cfg, opts=job_options(env, cfg, log), env=env, log=log,
                    budget=Budget(DEFAULT_TIMEOUT_S))
    s = array_step(ctx, v)
    log.info(f"job {jobid}: array {array_id} task {task_id} recorded unclassified ({why})")
    if s is not None:
        send_array(ctx, s)


def settle_array(env: dict[str, str], grace_s: float) -> None:
    """In a forked child, once the queue is empty: an array whose summary has not gone out
    although no task of it is still active in Slurm, in the queue, or ended less than grace_s
    ago, waits on tasks whose job epilog never recorded them (seen: 84 of 500 in a burst on
    an overloaded controller, with no trace of their EpilogSlurmctld). Each is recorded
    unclassified (failed unless accounting says COMPLETED), so the last one sends the summary.
    Ends EXIT_NOT_YET while that cannot be said yet."""
    log = HookLog("epilog-slurmctld")
    Watchdog(log, 3 * DEFAULT_TIMEOUT_S)
    array_id = env["SLURM_ARRAY_JOB_ID"]
    st = array_state(env)
    if st is None:
        return
    if st.get("sent"):
        return
    states = array_acct.task_states(array_id)
    acct = array_acct.accounted(array_id)
    if states is None or acct is None:
        os._exit(EXIT_NOT_YET)
    now = time.time()
    tasks = st.get("tasks") or {}
    done = {t for t, r in tasks.items() if isinstance(r, dict) and not r.get("in_flight")}
    missing = {t: a for t, a in acct.items() if t not in done}
    active = {t for t, state in states.items() if state not in FINAL_STATES}
    if active - done:
        os._exit(EXIT_NOT_YET)  # pending, running or completing: its own epilog may come
    if set(states) - done - set(acct):
        # ended in slurmctld but not yet in accounting with its nodes (slurmdbd lags behind
        # a quick array): its record may come, so this is not "nothing to wait for"
        os._exit(EXIT_NOT_YET)
    if not missing:
        return  # nothing to wait for: the last record sends it (or the array had no failure)
    if any(not end or now - end < grace_s for _j, end, _s in missing.values()):
        os._exit(EXIT_NOT_YET)
    cfg = load_config_logged(log)
    if cfg is None:
        return
    log.set_spool(cfg.spool)
    for t, (jobid, _end, state) in sorted(missing.items(), key=lambda kv: int(kv[0])):
        e = dict(env, SLURM_JOB_ID=jobid, SLURM_ARRAY_TASK_ID=t,
                 SLURM_JOB_EXIT_CODE2="0:0" if state == "COMPLETED" else "1:0")
        why = ("its job epilog did not finish" if t in tasks
               else "no job epilog ran for it (slurmctld started none, or it was lost)")
        _record(cfg, e, unclassified_verdict(e, why), log, why)


def unclassified_verdict(env: dict[str, str], why: str) -> dict[str, Any]:
    """What the array's summary records of a task gpualert could not classify: failed by its
    exit code (SLURM_JOB_EXIT_CODE2, from slurmctld), class unknown, and why."""
    jobid = env.get("SLURM_JOB_ID", "?")
    failed = True
    code = env.get("SLURM_JOB_EXIT_CODE2", "")
    if ":" in code:
        failed = code != "0:0"
    return {"job_id": jobid,
            "array": {"job_id": env.get("SLURM_ARRAY_JOB_ID"),
                      "task_id": env.get("SLURM_ARRAY_TASK_ID")},
            "failed": failed,
            "verdict": {"class": "unknown", "evidence": [],
                        "hint": f"not classified: {why}; its logs are in the spool "
                                f"(gpualert show {jobid})"},
            "job": {"name": env.get("SLURM_JOB_NAME"), "user": env.get("SLURM_JOB_USER")}}
