"""`gpualert mailprog`: a MailProg for slurm.conf, so `--mail-type` keeps working.

slurmctld runs it as SlurmUser, like mail(1):

    MailProg -s "Slurm Job_id=123 Name=train Failed, Run time 00:10:02, FAILED, ExitCode 1" user

with the job's facts in the environment (SLURM_JOB_ID, SLURM_JOB_MAIL_TYPE, SLURM_JOB_STATE,
SPANK_GPUALERT, ...). It sends Slurm's message through gpualert's outbox (same relay, bounds,
allowlist and retries as the reports), and, by mail.slurm_mail:
    enrich   (default) for an end/fail mail of a job gpualert monitors, waits up to
             mail.slurm_mail_wait_s for the job's verdict and adds it (class, hint, root rank
             and node, first evidence lines) to the message;
    forward  passes Slurm's message on unchanged;
    suppress sends nothing for an end/fail mail that a gpualert report replaces (a monitored
             job, notify= not never; a COMPLETED one only under notify=always); other mails
             (begin, requeue, time-limit warnings) and unmonitored jobs still go.
Exit status 0 when the message was sent, queued or deliberately suppressed; 1 (and a line
slurmctld logs) when it could not be sent nor kept, or the config is wrong.
"""

from __future__ import annotations

import argparse
import email.message
import os
import re
import select
import sys
import time
from collections.abc import Mapping
from typing import Any

from gpualert_slurm.config import Config, ConfigError, load_config
from gpualert_slurm.notify.core import safe_header, submit
from gpualert_slurm.notify.recipients import check_addresses
from gpualert_slurm.options import OptionError, options_from_env

# Slurm's _mail_type_str() words for the mails sent when a job ends.
END_TYPES = frozenset({"Ended", "Failed", "Staged Out"})
_JOB_RE = re.compile(r"Job_id=(\d+)(?:_(\d+))?")
MAX_BODY = 1 << 20
POLL_S = 0.5
MAILPROG_BOUND_S = 110.0  # slurmctld kills MailProg after 120 s


def _read_stdin(timeout: float = 1.0) -> str:
    """Slurm gives no body (stdin is /dev/null); a person testing by hand may pipe one."""
    try:
        if sys.stdin is None or sys.stdin.isatty():
            return ""
        ready, _, _ = select.select([sys.stdin], [], [], timeout)
        if not ready:
            return ""
        return sys.stdin.buffer.read(MAX_BODY).decode("utf-8", "replace")
    except (OSError, ValueError):
        return ""


def _verdict(cfg: Config, job_id: str) -> dict[str, Any] | None:
    """The job's verdict.json (latest attempt), or None while there is none."""
    from gpualert_slurm.spool import (
        SpoolError,
        attempt_dir,
        job_dir,
        latest_attempt,
        open_dir,
        read_json_nofollow,
    )

    path = job_dir(cfg.spool, job_id)
    try:
        where = attempt_dir(path, latest_attempt(path))
        fd = open_dir(where)
    except (OSError, SpoolError, ValueError):
        return None
    try:
        data = read_json_nofollow("verdict.json", fd)
    except (OSError, SpoolError, ValueError):
        return None
    finally:
        os.close(fd)
    if not isinstance(data, dict):
        return None
    inner = data.get("verdict")
    return inner if isinstance(inner, dict) else data


def wait_verdict(cfg: Config, job_id: str, wait_s: float) -> dict[str, Any] | None:
    end = time.monotonic() + wait_s
    while True:
        v = _verdict(cfg, job_id)
        if v is not None or time.monotonic() >= end:
            return v
        time.sleep(min(POLL_S, max(0.0, end - time.monotonic())))


def verdict_lines(v: Mapping[str, Any], job_id: str) -> list[str]:
    cls = v.get("class") or v.get("cls") or "unknown"
    lines = ["", "-- gpualert --", f"Cause: {cls}"]
    if v.get("hint"):
        lines.append(f"Hint: {v['hint']}")
    if v.get("detail"):
        lines.append(f"Detail: {v['detail']}")
    root = [f"rank {v['root_rank']}" if v.get("root_rank") is not None else "",
            f"node {v['root_node']}" if v.get("root_node") else ""]
    if any(root):
        lines.append("First failure: " + ", ".join(r for r in root if r))
    evidence = v.get("evidence") or []
    if isinstance(evidence, list) and evidence:
        lines.append("Evidence:")
        for e in evidence[:5]:
            if isinstance(e, dict):
                lines.append(f"  {e.get('file', '?')}:{e.get('line', '?')}: "
                             f"{str(e.get('text', ''))[:300]}")
    lines.append(f"Full report: `gpualert show {job_id}` (and the gpualert mail, if enabled)")
    return lines


def _job_facts(env: Mapping[str, str]) -> list[str]:
    keys = (("Job", "SLURM_JOB_ID"), ("Name", "SLURM_JOB_NAME"), ("User", "SLURM_JOB_USER"),
            ("Partition", "SLURM_JOB_PARTITION"), ("Nodes", "SLURM_JOB_NODELIST"),
            ("State", "SLURM_JOB_STATE"), ("Run time", "SLURM_JOB_RUN_TIME"),
            ("Exit code", "SLURM_JOB_EXIT_CODE_MAX"), ("Work dir", "SLURM_JOB_WORK_DIR"))
    return [f"{label}: {safe_header(env[k], 500)}" for label, k in keys if env.get(k)]


def build_message(subject: str, body: str, rcpts: list[str], cfg: Config,
                  env: Mapping[str, str], verdict: Mapping[str, Any] | None,
                  job_id: str) -> email.message.EmailMessage:
    msg = email.message.EmailMessage()
    subj = safe_header(subject, 900)
    if verdict is not None:
        cls = verdict.get("class") or verdict.get("cls")
        if cls:
            subj = safe_header(f"{subj} [gpualert: {cls}]", 900)
    msg["Subject"] = subj
    msg["From"] = cfg.mail.sender
    msg["To"] = ", ".join(rcpts)
    msg["X-Gpualert-Source"] = "slurm-mailprog"
    if job_id:
        msg["X-Gpualert-Job"] = safe_header(job_id, 40)
    text = body.rstrip("\n") or "\n".join([subj, "", *_job_facts(env)])
    if verdict is not None:
        text += "\n" + "\n".join(verdict_lines(verdict, job_id))
    msg.set_content(text + "\n")
    return msg


def run(subject: str, users: list[str], env: Mapping[str, str], cfg: Config,
        body: str = "") -> tuple[int, str]:
    """What main() does, without argv and stdio: (exit status, the line to print)."""
    start = time.monotonic()
    m = _JOB_RE.search(subject)
    job_id = env.get("SLURM_JOB_ID") or (m.group(1) if m else "") or ""
    mail_type = env.get("SLURM_JOB_MAIL_TYPE", "")
    if not mail_type:  # older Slurm: the type is the word before the first comma
        t = re.search(r"Name=.*? ([A-Z][A-Za-z ]+?),", subject)
        mail_type = t.group(1) if t else ""
    try:
        opts = options_from_env(env.get("SPANK_GPUALERT"), cfg.default_monitoring)
    except OptionError:
        opts = None
    monitored = opts is not None and opts.monitored
    ends = mail_type in END_TYPES
    # Suppressed only where a gpualert report takes its place: not under notify=never, and a
    # job that completed gets a report only with notify=always.
    replaced = monitored and ends and opts is not None and opts.notify != "never" and (
        opts.notify == "always" or env.get("SLURM_JOB_STATE", "") != "COMPLETED")
    if cfg.mail.slurm_mail == "suppress" and replaced:
        return 0, (f"gpualert mailprog: job {job_id}: Slurm's '{mail_type}' mail suppressed "
                   "(mail.slurm_mail: suppress; gpualert's report replaces it)")
    addrs = [u if "@" in u else (cfg.mail.address_for(u) or "") for u in users]
    allowed, refused = check_addresses([a for a in addrs if a], cfg)
    unmapped = [u for u, a in zip(users, addrs, strict=True) if not a]
    notes = [f"{u}: no address (set mail.domain or mail.users)" for u in unmapped]
    notes += [f"{a}: {why}" for a, why in refused]
    if not allowed:
        return 1, f"gpualert mailprog: job {job_id}: no permitted recipient: {'; '.join(notes)}"
    verdict = None
    if cfg.mail.slurm_mail == "enrich" and monitored and ends and job_id:
        verdict = wait_verdict(cfg, job_id, cfg.mail.slurm_mail_wait_s)
    msg = build_message(subject, body, allowed, cfg, env, verdict, job_id)
    left = MAILPROG_BOUND_S - (time.monotonic() - start)
    d = submit(msg, cfg=cfg, job_id=job_id or "slurm", channels=["mail"],
               timeout_s=max(1.0, min(cfg.notify.total_timeout_s, left)))
    extra = f" (refused: {'; '.join(notes)})" if notes else ""
    enriched = " with the verdict" if verdict is not None else ""
    line = f"gpualert mailprog: job {job_id}: {d.status}{enriched}: {d.reason}{extra}"
    return (1 if d.status == "failed" else 0), line


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="gpualert mailprog", description=__doc__.split("\n")[0])
    ap.add_argument("-s", dest="subject", default="", help="subject (Slurm passes it)")
    ap.add_argument("--config", help="config file (default: $GPUALERT_CONFIG or "
                    "/etc/gpualert/gpualert.yaml)")
    ap.add_argument("users", nargs="+", help="recipients: addresses or Slurm user names")
    args, _unknown = ap.parse_known_args(argv)  # mail(1) flags Slurm never passes: ignored
    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        print(f"gpualert mailprog: {e}", file=sys.stderr)
        return 1
    status, line = run(args.subject, args.users, os.environ, cfg, _read_stdin())
    print(line, file=sys.stderr if status else sys.stdout)
    return status


def entry() -> int:
    """The `gpualert-mailprog` console script: what slurm.conf's MailProg= names."""
    return main(sys.argv[1:])
