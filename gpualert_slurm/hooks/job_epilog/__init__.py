"""`gpualert hook epilog-slurmctld`: the job epilog, once per job on the controller.

Waits (bounded) for the nodes' verdicts, asks Slurm for the job's final state and reason,
classifies all ranks together, writes <attempt dir>/verdict.json, bundles logs and artifacts
under the budget, renders the report and hands it to gpualert_slurm.notify (outbox first, so a
dead relay loses nothing). Job arrays get one summary per array unless the site asks for one
report per task. Bounded: epilog_wait_s for the nodes plus hook_timeout_s for the rest, within
the shim's timeout; returns 0 whatever happens.

The parts: context (the JobEpilog and its Budget), facts (Slurm's and the nodes'), verdict
(verdict.json), arrays (summaries and rate caps), delivery (report, recovery), pending
(reports a killed epilog left unfinished), state (root's locked state files).
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import suppress
from typing import Any

from gpualert_slurm.core import slurm
from gpualert_slurm.core.spool import SpoolError
from gpualert_slurm.hooks import cost, gate
from gpualert_slurm.hooks.classify_child import PendingVerdict
from gpualert_slurm.hooks.common import DEFAULT_TIMEOUT_S, HookLog, Watchdog, load_config_logged
from gpualert_slurm.hooks.job_epilog.arrays import array_begin, array_step
from gpualert_slurm.hooks.job_epilog.context import Budget, JobEpilog
from gpualert_slurm.hooks.job_epilog.delivery import (
    fallback_report,
    recover,
    send_array,
    send_job,
    should_send,
    warm_up,
)
from gpualert_slurm.hooks.job_epilog.facts import (
    classify_facts,
    ended_attempt,
    nodes_to_wait_for,
    slurm_facts,
    slurm_output,
    wait_node_verdicts,
)
from gpualert_slurm.hooks.job_epilog.pending import clear_pending, mark_pending, sweep_pending
from gpualert_slurm.hooks.job_epilog.verdict import build_verdict, save_verdict
from gpualert_slurm.hooks.jobspool import (
    close_task_logs,
    job_options,
    open_job_spool,
    open_task_logs,
)
from gpualert_slurm.hooks.run_hook import detach, run_hook


def run() -> int:
    return run_hook("epilog-slurmctld", hook)


def hook(env: dict[str, str], log: HookLog, watchdog: Watchdog) -> None:
    """Detach the work from Slurm (a monitored job with a usable config), unless the caller
    asks for it in the foreground (GPUALERT_HOOK_FOREGROUND=1: tests)."""
    if env.get("GPUALERT_HOOK_FOREGROUND") == "1" or not _worth_a_worker(env, log):
        job_epilog(env, log, watchdog)
    elif detach():
        # The worker: at most gate.slots() at work at once (a burst of ending jobs must not
        # starve slurmctld), a new watchdog (threads do not survive fork), then the report.
        gate.enter()  # its wait is in the job epilog's cost line
        try:
            job_epilog(env, log, Watchdog(log, DEFAULT_TIMEOUT_S))
        except Exception as e:
            log.error(f"job {env['SLURM_JOB_ID']}: unexpected error: {e!r}")
        os._exit(0)


def _worth_a_worker(env: dict[str, str], log: HookLog) -> bool:
    """A monitored job with a usable config: else the foreground run just logs and returns."""
    from gpualert_slurm.core.config import ConfigError, load_config

    try:
        return job_options(env, load_config(), log).monitored
    except ConfigError:
        return False


def job_epilog(env: dict[str, str], log: HookLog, watchdog: Watchdog) -> None:
    ctx = _start(env, log, watchdog, time.monotonic())
    if ctx is None or not _open_spool(ctx):
        return
    marked = mark_pending(ctx)
    try:
        _report(ctx)
    except Exception as e:  # a bug of ours: the user still hears that the job failed
        log.error(f"job {ctx.jobid}: unexpected error: {e!r}")
        if ctx.verdict is None or "report" not in ctx.verdict:
            fallback_report(ctx, e)
    finally:
        close_task_logs(ctx.tasks)
        ctx.spool.close()
    if marked:
        clear_pending(ctx.cfg, ctx.jobid)
    log.info(cost.line(ctx.jobid, "epilog-slurmctld"))
    # Spare time: finish the reports of job epilogs that an overloaded controller cut short.
    if ctx.budget.spare():
        with suppress(Exception):
            sweep_pending(ctx.cfg, log, deadline=ctx.budget.sweep_deadline())


def _start(env: dict[str, str], log: HookLog, watchdog: Watchdog, t0: float
           ) -> JobEpilog | None:
    """The context of a monitored job with a usable config, its bound set; else None."""
    cfg = load_config_logged(log)
    if cfg is None:
        return None
    budget = Budget.for_hook(cfg, t0)
    watchdog.rearm(budget.bound)
    log.set_spool(cfg.spool)
    opts = job_options(env, cfg, log)
    if not opts.monitored:
        return None
    # Slurm started it when the shim queued it, before the wait for a worker's slot
    ctx = JobEpilog(cfg=cfg, opts=opts, env=env, log=log, budget=budget,
                    started_at=time.time() - (gate.waited_s or 0.0))
    os.environ.setdefault("GPUALERT_TEMPLATES", ctx.rc.templates)  # report.template_dirs()
    return ctx


def _open_spool(ctx: JobEpilog) -> bool:
    """Open the job's spool dir into ctx; False (logged) when there is none to report from.
    An array task that never ran still counts for its array's summary."""
    cfg, jobid, log = ctx.cfg, ctx.jobid, ctx.log
    uid_s = ctx.env.get("SLURM_JOB_UID", "")
    if not os.path.isdir(cfg.spool) or not uid_s.isdigit():
        log.error(f"job {jobid}: spool {cfg.spool} missing or SLURM_JOB_UID={uid_s!r} unusable;"
                  " no report")
        return False
    try:
        ctx.attempt = ended_attempt(jobid, ctx.env, ctx.started_at)
        ctx.js = open_job_spool(cfg.spool, jobid, int(uid_s), ctx.attempt)
    except FileNotFoundError:
        log.info(f"job {jobid}: no spool dir (never started, or not monitored on its nodes)")
        if ctx.is_array:
            with suppress(Exception):
                s = array_step(ctx, None)
                if s is not None and any(t.get("ran") for t in s["tasks"].values()):
                    send_array(ctx, s)
        return False
    except (OSError, SpoolError) as e:
        log.error(f"job {jobid}: {e}; no report")
        return False
    return True


def _report(ctx: JobEpilog) -> None:
    """The verdict, recovery's decision, the report, recovery's actions, the array's summary."""
    if ctx.array_summary:
        try:
            array_begin(ctx)
        except OSError as e:
            ctx.log.error(f"job {ctx.jobid}: array {ctx.array_id} state: {e}")
    v = _judge(ctx)
    per_task = not ctx.is_array or ctx.rc.arrays == "per_task"
    # Recovery decides (and records) before the report, so that the mail says what it
    # does and why, within what the send's reserve leaves; it acts after the report.
    left = ctx.budget.before_reserve()
    pre = recover(ctx, v, left, act=False) if left >= 1.0 else None
    if should_send(ctx.opts, v) and per_task:
        send_job(ctx, v)
    elif not per_task:
        v["report"] = {"status": "in the array summary", "reason": None}
        save_verdict(ctx, v)
    # after the report is safe in the outbox: the actions get what time is left
    if pre is None or pre.get("outcome") in ("planned", "undecided", "error"):
        recover(ctx, v, ctx.budget.left())
    if ctx.array_summary:
        try:
            s = array_step(ctx, v)
        except OSError as e:
            ctx.log.error(f"job {ctx.jobid}: array {ctx.array_id} state: {e}; no summary from "
                          "this task")
            s = None
        if s is not None:
            send_array(ctx, s)


def _judge(ctx: JobEpilog) -> dict[str, Any]:
    """Classify while the nodes' evidence comes in; again only if it brings kernel lines or
    moved GPU counters (rare), which the classifier must see. Writes verdict.json."""
    js, env, b = ctx.spool, ctx.env, ctx.budget
    nodes = slurm.expand_hostlist(env.get("SLURM_JOB_NODELIST", "")) \
        if env.get("SLURM_JOB_NODELIST") else list(js.job.get("nodes") or [])
    warm = threading.Thread(target=warm_up, daemon=True)
    warm.start()
    ctx.tasks = open_task_logs(js)
    batch = next((t for t in ctx.tasks if t.step == "batch"), None)
    sf = slurm_facts(ctx.jobid, env, (batch.exit or {}).get("signal") if batch else None,
                     ctx.attempt)
    for m in sf["identity_mismatch"]:
        ctx.log.error(f"job {ctx.jobid}: Slurm's record disagrees with the hook's "
                        f"environment ({m}): the environment is used")
    if sf["signal"] or sf["slurm_state"] == "OUT_OF_MEMORY":  # a memory kill is a SIGKILL
        ctx.slurm_output = slurm_output(sf, env)
    now = time.time()
    warm.join(b.warm_up_left())
    early = PendingVerdict(ctx.tasks, classify_facts(ctx, sf, {}, now), [],
                           slurm_output=ctx.slurm_output)
    node_recs = wait_node_verdicts(js, nodes_to_wait_for(nodes, sf), b.node_wait_left(ctx.cfg))
    v = build_verdict(ctx, node_recs, nodes, sf, now, classify_s=max(1.0, b.before_reserve()),
                      early=early)
    ctx.verdict = v
    save_verdict(ctx, v)
    ctx.log.info(f"job {ctx.jobid}: verdict {v['verdict'].get('class')} "
                 f"(state {sf['slurm_state']}, {len(ctx.tasks)} task logs, "
                 f"{len(node_recs)}/{len(nodes)} node verdicts) in {b.elapsed():.2f} s")
    return v
