"""What leaves the job epilog: the report (artifacts bundled under the budget, rendered, handed
to notify: outbox first, so a dead relay loses nothing), the array summary, the least report
when gpualert itself failed, and the verdict handed to the recovery policy."""

from __future__ import annotations

import time
from contextlib import suppress
from typing import Any

from gpualert_slurm.core.options import Options
from gpualert_slurm.hooks.job_epilog.arrays import array_context, per_array_ok, rate_ok
from gpualert_slurm.hooks.job_epilog.context import JobEpilog
from gpualert_slurm.hooks.job_epilog.verdict import fallback_verdict, save_verdict
from gpualert_slurm.hooks.jobspool import JobSpool


def deliver(ctx: JobEpilog, subject: str, text: str, html: str, attachments: list[Any],
            job_id: str, mail_user: str | None, timeout_s: float | None = None,
            inline: list[Any] = ()) -> dict[str, Any]:
    """Build the message and hand it to notify.submit (outbox first, bounded sending)."""
    from gpualert_slurm.report import build_message

    cfg, log = ctx.cfg, ctx.log
    try:
        from gpualert_slurm import notify
    except ImportError as e:
        log.error(f"job {job_id}: notify is not available ({e}); report kept in verdict.json")
        return {"status": "not sent", "reason": f"notify unavailable: {e}"}
    env2 = dict(ctx.env)
    if mail_user and not env2.get("SLURM_JOB_MAIL_USER"):
        env2["SLURM_JOB_MAIL_USER"] = mail_user
    refused: list[Any] = []
    try:
        rcpts = notify.resolve_recipients(ctx.opts, env2, cfg)
        recipients = list(rcpts)
        refused = [list(r) for r in getattr(rcpts, "refused", [])]
    except Exception as e:
        log.error(f"job {job_id}: recipients: {e}")
        recipients = []
    if not recipients:
        log.error(f"job {job_id}: no permitted recipient (mail=, --mail-user, config rules): "
                  f"{refused}")
    msg = build_message(subject, text, html, sender=cfg.mail.sender, recipients=recipients,
                        attachments=[(a.filename, a.data, a.mime) for a in attachments],
                        job_id=job_id, inline=list(inline),
                        job_user=ctx.env.get("SLURM_JOB_USER", ""))
    try:
        d = notify.submit(msg, cfg=cfg, job_id=job_id, timeout_s=timeout_s)
    except Exception as e:  # submit promises not to raise; a hook never trusts that
        log.error(f"job {job_id}: notify.submit raised {e!r}")
        return {"status": "error", "reason": repr(e), "recipients": recipients}
    return {"status": getattr(d, "status", "?"), "reason": getattr(d, "reason", None),
            "outbox": getattr(d, "path", None), "recipients": recipients, "refused": refused}


def should_send(opts: Options, v: dict[str, Any]) -> bool:
    if opts.notify == "never":
        return False
    if opts.notify == "always":
        return True
    return bool(v.get("failed") or v.get("silent_failure"))


def warm_up() -> None:
    """Compile the rules and the templates while scontrol answers (a subprocess: the GIL is
    free): the classifier's child inherits the rules, the report renders at once."""
    with suppress(Exception):
        from gpualert_slurm.classify import load_rules

        load_rules()
    with suppress(Exception):
        from gpualert_slurm.core.templates import get_template

        for name in ("report.txt.j2", "report.html.j2"):
            get_template(name)


def send_job(ctx: JobEpilog, v: dict[str, Any], kind: str = "report") -> None:
    """Bundle, render (templates `kind`.{txt,html}.j2: report, or fallback) and send, within
    the rate caps and what the budget leaves: an overloaded controller sends the mail without
    the artifacts."""
    from gpualert_slurm.core.artifacts import bundle_for_job
    from gpualert_slurm.report import inline_images, render, subject

    cfg, opts, js, b, log = ctx.cfg, ctx.opts, ctx.spool, ctx.budget, ctx.log
    jobid = v["job_id"]
    rc = ctx.rc
    if v.get("array") and rc.arrays == "per_task" and not per_array_ok(cfg, v):
        v["report"] = {"status": "not sent",
                       "reason": f"cap of {rc.max_per_array} reports per array reached"}
        save_verdict(ctx, v)
        return
    if not rate_ok(cfg, v["job"].get("user") or "", time.time()):
        v["report"] = {"status": "not sent", "reason":
                       f"cap of {rc.max_per_user_hour} reports per user per hour reached"}
        save_verdict(ctx, v)
        log.error(f"job {jobid}: report not sent: {v['report']['reason']}")
        return
    budget = opts.budget_bytes or cfg.budget_bytes
    gid = _gid(js)
    left = b.before_watchdog()
    globs = [*opts.artifacts, *rc.artifacts]
    short = left < b.reserve / 2  # an overloaded controller: the mail goes first
    bundle = bundle_for_job(ctx.tasks, budget, js.uid, gid, v["job"].get("work_dir"),
                            [] if short else globs, timeout_s=max(1.0, left / 3))
    for g in globs if short else []:
        bundle.skip("artifact", g, None, "not collected: the job epilog ran out of time",
                    v["job"].get("work_dir") or "?")
    v["artifacts"] = bundle.manifest()
    save_verdict(ctx, v)
    left = b.before_watchdog()
    images = inline_images(v) if left > 4.0 else []  # the timeline of a multi-node failure
    url = rc.url  # report.url: the mail links to the job's web page
    d = deliver(ctx, subject(v), render(v, "text", kind=kind, url=url),
                render(v, "html", tuple(c for c, _d, _m in images), kind, url), bundle.files,
                jobid, v["job"].get("mail_user"),
                timeout_s=max(1.0, min(left, cfg.notify.total_timeout_s)), inline=images)
    v["report"] = {"subject": subject(v), **d, "time": time.time()}
    save_verdict(ctx, v)
    log.info(f"job {jobid}: report {d.get('status')} ({d.get('reason') or 'ok'}) "
             f"in {b.elapsed():.2f} s")


def send_array(ctx: JobEpilog, s: dict[str, Any]) -> None:
    """The array's one summary (array_step said this task ends the array)."""
    from gpualert_slurm.report import render_array

    opts, log = ctx.opts, ctx.log
    a = array_context(s, ctx.cfg.spool)
    if not a["failed"] and opts.notify != "always":
        return
    if opts.notify == "never":
        return
    if not rate_ok(ctx.cfg, a.get("user") or "", time.time()):
        log.error(f"array {a['array_id']}: summary not sent: per-user cap reached")
        return
    subj = f"[gpualert] {a['headline']}"
    d = deliver(ctx, subj, render_array(a, "text"), render_array(a, "html"), [],
                f"{a['array_id']}", None)
    log.info(f"array {a['array_id']}: summary {d.get('status')} ({d.get('reason') or 'ok'})")


def fallback_report(ctx: JobEpilog, err: Exception) -> None:
    """The least report: Slurm's exit code, the logs, and what went wrong in gpualert."""
    v = fallback_verdict(ctx, err)
    try:
        save_verdict(ctx, v)
        if should_send(ctx.opts, v):
            send_job(ctx, v, kind="fallback")
    except Exception as e:
        ctx.log.error(f"job {v['job_id']}: fallback report failed too: {e!r}")


def recover(ctx: JobEpilog, v: dict[str, Any], left: float, act: bool = True
            ) -> dict[str, Any] | None:
    """Hand the verdict to the recovery policy (gpualert_slurm/recovery; act=False: decide
    only); what it decided goes into verdict.json's "recovery" for the report. Its failure
    never touches the epilog."""
    try:
        from gpualert_slurm import recovery

        r = recovery.on_verdict(ctx.cfg, v, ctx.log, time.monotonic() + max(1.0, left / 2),
                                act=act)
        if r is not None:
            v["recovery"] = r
            save_verdict(ctx, v)
        return r
    except Exception as e:  # on_verdict promises not to raise; a hook never trusts that
        ctx.log.error(f"job {v.get('job_id')}: recovery: {e!r}")
        return {"outcome": "error"}


def _gid(js: JobSpool) -> int:
    g = js.job.get("gid")
    if isinstance(g, int):
        return g
    import pwd

    try:
        return pwd.getpwuid(js.uid).pw_gid
    except KeyError:
        return js.uid
