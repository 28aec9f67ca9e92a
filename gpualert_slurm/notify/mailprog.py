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
With mail.slurm_mail_chain (the site's previous MailProg: jobstats_mail.sh, slurm-spool-mail)
gpualert does not send Slurm's mail itself: after enriching or suppressing as above, it runs that
MailProg with the argv and environment Slurm gave, so the other tool keeps working; the enriched
text is its stdin (mail(1)-style MailProgs put it in the body; Slurm's own stdin is /dev/null).
A suppressed mail is not handed on. mail.slurm_mail_chain_send: gpualert also sends its copy.
Exit status 0 when the message was sent, queued, handed on or deliberately suppressed; 1 (and a
line slurmctld logs) when it could not be sent nor kept, or the config is wrong; the chained
MailProg's own status when that failed.
"""

from __future__ import annotations

import argparse
import contextlib
import email.message
import os
import re
import select
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

from gpualert_slurm.core.config import Config, ConfigError, load_config
from gpualert_slurm.core.options import OptionError, options_from_env
from gpualert_slurm.core.verdict import Cause
from gpualert_slurm.notify.core import safe_header, submit
from gpualert_slurm.notify.recipients import check_addresses

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


def _verdict(cfg: Config, job_id: str) -> Cause | None:
    """The job's cause (its latest attempt's verdict), or None while there is none. Only a
    verdict.json root wrote about this job and that attempt counts (core.verdict.read_run):
    a user's own file in an attempt-N directory they made is not enrichment."""
    from gpualert_slurm.core.spool import job_dir, latest_attempt
    from gpualert_slurm.core.verdict import read_run

    try:
        return read_run(cfg.spool, job_id, latest_attempt(job_dir(cfg.spool, job_id))).cause
    except (OSError, ValueError):
        return None


def wait_verdict(cfg: Config, job_id: str, wait_s: float) -> Cause | None:
    end = time.monotonic() + wait_s
    while True:
        v = _verdict(cfg, job_id)
        if v is not None or time.monotonic() >= end:
            return v
        time.sleep(min(POLL_S, max(0.0, end - time.monotonic())))


def _cause(v: Cause | Mapping[str, Any]) -> Cause:
    return v if isinstance(v, Cause) else Cause.from_json(dict(v))


def verdict_text(v: Cause | Mapping[str, Any], job_id: str, site: str | None = None) -> str:
    """The verdict block added to Slurm's mail (template mailprog.txt.j2, docs/TEMPLATES.md):
    '-- gpualert --', the cause, hint, detail, first failure, up to 5 evidence lines and where
    the full report is; no newline at either end."""
    from gpualert_slurm.core.templates import render

    v = _cause(v)
    # a key an evidence item lacks reads '?' (file, line) or '' (text), as it always did
    evidence = [{"file": str("?" if "file" in e.omitted else e.file),
                 "line": str("?" if "line" in e.omitted else e.line),
                 "text": "" if "text" in e.omitted else str(e.text)[:300]}
                for e in v.evidence[:5]]
    return render("mailprog.txt.j2", site, job_id=job_id, cls=v.klass, hint=v.hint,
                  detail=v.detail, root_rank=v.root_rank, root_node=v.root_node,
                  evidence=evidence)


def _job_facts(env: Mapping[str, str]) -> list[str]:
    keys = (("Job", "SLURM_JOB_ID"), ("Name", "SLURM_JOB_NAME"), ("User", "SLURM_JOB_USER"),
            ("Partition", "SLURM_JOB_PARTITION"), ("Nodes", "SLURM_JOB_NODELIST"),
            ("State", "SLURM_JOB_STATE"), ("Run time", "SLURM_JOB_RUN_TIME"),
            ("Exit code", "SLURM_JOB_EXIT_CODE_MAX"), ("Work dir", "SLURM_JOB_WORK_DIR"))
    return [f"{label}: {safe_header(env[k], 500)}" for label, k in keys if env.get(k)]


def build_message(subject: str, body: str, rcpts: list[str], cfg: Config,
                  env: Mapping[str, str], verdict: Cause | Mapping[str, Any] | None,
                  job_id: str) -> email.message.EmailMessage:
    msg = email.message.EmailMessage()
    subj = safe_header(subject, 900)
    if verdict is not None:
        verdict = _cause(verdict)
        if verdict.cls:
            subj = safe_header(f"{subj} [gpualert: {verdict.cls}]", 900)
    msg["Subject"] = subj
    msg["From"] = cfg.mail.sender
    msg["To"] = ", ".join(rcpts)
    msg["X-Gpualert-Source"] = "slurm-mailprog"
    if job_id:
        msg["X-Gpualert-Job"] = safe_header(job_id, 40)
    text = body.rstrip("\n") or "\n".join([subj, "", *_job_facts(env)])
    if verdict is not None:
        text += "\n\n" + verdict_text(verdict, job_id, cfg.report.templates)
    msg.set_content(text + "\n")
    return msg


def check_chain(path: str) -> str | None:
    """Why the chained MailProg may not be run (None: it may). It runs as SlurmUser with the
    job's variables: only a program no one but root (or SlurmUser) could have replaced."""
    try:
        st = os.stat(path)
    except OSError as e:
        return f"cannot stat it: {e.strerror}"
    if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o111:
        return "not an executable file"
    if st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
        return (f"owned by uid {st.st_uid} with mode {stat.S_IMODE(st.st_mode):04o}: it must be "
                "root's (or SlurmUser's) and writable by no one else")
    return None


def run_chain(path: str, argv: list[str], env: Mapping[str, str], text: str | None,
              timeout_s: float) -> tuple[int, str]:
    """Run the site's previous MailProg with Slurm's argv and environment, `text` on stdin
    (None: /dev/null, as Slurm gives), within timeout_s (then its process group is killed)."""
    why = check_chain(path)
    if why is not None:
        return 1, f"mail.slurm_mail_chain {path}: {why}: refused"
    try:
        p = subprocess.Popen([path, *argv], env=dict(env), start_new_session=True,
                             stdin=subprocess.DEVNULL if text is None else subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, close_fds=True)
    except OSError as e:
        return 1, f"mail.slurm_mail_chain {path}: cannot run it: {e.strerror}"
    try:
        out, _ = p.communicate(None if text is None else text.encode(), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        return 1, f"mail.slurm_mail_chain {path}: killed after {timeout_s:.0f} s"
    tail = out.decode("utf-8", "replace").strip().splitlines()[-1:] if out else []
    said = f" ({safe_header(tail[0], 300)})" if tail else ""
    if p.returncode != 0:
        return p.returncode if p.returncode > 0 else 1, \
            f"mail.slurm_mail_chain {path}: exit status {p.returncode}{said}"
    return 0, f"handed on to {path}{said}"


def run(subject: str, users: list[str], env: Mapping[str, str], cfg: Config,
        body: str = "", argv: list[str] | None = None) -> tuple[int, str]:
    """What main() does, without stdio: (exit status, the line to print). `argv` is what
    Slurm gave (after the program name), for the chained MailProg; None: `-s subject users`."""
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
    if cfg.mail.slurm_mail_chain:
        return _run_chained(subject, users, env, cfg, body, argv, job_id, monitored and ends,
                            start)
    verdict = None
    if cfg.mail.slurm_mail == "enrich" and monitored and ends and job_id and _recipients(
            users, cfg)[0]:
        verdict = wait_verdict(cfg, job_id, cfg.mail.slurm_mail_wait_s)
    return _send_own(subject, users, env, cfg, body, verdict, job_id, start)


def _recipients(users: list[str], cfg: Config) -> tuple[list[str], list[str]]:
    """(permitted addresses, notes on the users refused or unmapped)."""
    addrs = [u if "@" in u else (cfg.mail.address_for(u) or "") for u in users]
    allowed, refused = check_addresses([a for a in addrs if a], cfg)
    unmapped = [u for u, a in zip(users, addrs, strict=True) if not a]
    notes = [f"{u}: no address (set mail.domain or mail.users)" for u in unmapped]
    notes += [f"{a}: {why}" for a, why in refused]
    return allowed, notes


def _send_own(subject: str, users: list[str], env: Mapping[str, str], cfg: Config, body: str,
              verdict: Cause | None, job_id: str, start: float) -> tuple[int, str]:
    """gpualert sends Slurm's mail (enriched with `verdict`, if any) through its outbox."""
    allowed, notes = _recipients(users, cfg)
    if not allowed:
        return 1, f"gpualert mailprog: job {job_id}: no permitted recipient: {'; '.join(notes)}"
    msg = build_message(subject, body, allowed, cfg, env, verdict, job_id)
    left = MAILPROG_BOUND_S - (time.monotonic() - start)
    d = submit(msg, cfg=cfg, job_id=job_id or "slurm", channels=["mail"],
               timeout_s=max(1.0, min(cfg.notify.total_timeout_s, left)))
    extra = f" (refused: {'; '.join(notes)})" if notes else ""
    enriched = " with the verdict" if verdict is not None else ""
    line = f"gpualert mailprog: job {job_id}: {d.status}{enriched}: {d.reason}{extra}"
    return (1 if d.status == "failed" else 0), line


def _run_chained(subject: str, users: list[str], env: Mapping[str, str], cfg: Config, body: str,
                 argv: list[str] | None, job_id: str, may_enrich: bool,
                 start: float) -> tuple[int, str]:
    """mail.slurm_mail_chain: enrich (the verdict as the chained MailProg's stdin), gpualert's own
    copy only under slurm_mail_chain_send, then the site's previous MailProg."""
    verdict = None
    if cfg.mail.slurm_mail == "enrich" and may_enrich and job_id:
        verdict = wait_verdict(cfg, job_id, cfg.mail.slurm_mail_wait_s)
    own = ""
    status = 0
    if cfg.mail.slurm_mail_chain_send:
        status, own = _send_own(subject, users, env, cfg, body, verdict, job_id, start)
        own = "; " + own.removeprefix(f"gpualert mailprog: job {job_id}: ")
    text = None
    if verdict is not None:
        text = (body.rstrip("\n") + "\n" if body.strip() else "") + \
            verdict_text(verdict, job_id, cfg.report.templates) + "\n"
    elif body:
        text = body
    left = MAILPROG_BOUND_S - (time.monotonic() - start)
    cstatus, cline = run_chain(cfg.mail.slurm_mail_chain or "", argv if argv is not None
                               else ["-s", subject, *users], env, text, max(5.0, left))
    enriched = " with the verdict" if verdict is not None else ""
    return (cstatus or status), f"gpualert mailprog: job {job_id}: {cline}{enriched}{own}"


def initial_env() -> dict[str, str]:
    """The environment exactly as this process was given it (/proc/self/environ): Python's
    locale coercion (PEP 538) adds LC_CTYPE=C.UTF-8 to os.environ when Slurm gave no locale,
    and a chained MailProg must get what Slurm gave."""
    try:
        with open("/proc/self/environ", "rb") as f:
            raw = f.read(1 << 20)
    except OSError:
        return dict(os.environ)
    out = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep and k:
            out[os.fsdecode(k)] = os.fsdecode(v)
    return out or dict(os.environ)


def _slurm_argv(argv: list[str]) -> list[str]:
    """argv without gpualert's own --config (Slurm never passes it; a chained MailProg would
    not know it)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--config":
            skip = True
        elif not a.startswith("--config="):
            out.append(a)
    return out


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
    status, line = run(args.subject, args.users, initial_env(), cfg, _read_stdin(),
                       argv=_slurm_argv(argv))
    print(line, file=sys.stderr if status else sys.stdout)
    return status


def entry() -> int:
    """The `gpualert-mailprog` console script: what slurm.conf's MailProg= names."""
    return main(sys.argv[1:])
