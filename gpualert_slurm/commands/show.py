"""`gpualert show JOBID [--json|--html] [--attempt N]`: the report of a finished job, from its
verdict.json (never re-running the epilog), for sites without a mail relay and for admins.

Root reads the user's job dir the careful way (no link followed, the file must be root's);
the job's user reads their own directory plainly (they own it)."""

from __future__ import annotations

import argparse
import os
import sys

from gpualert_slurm.core.config import ConfigError, load_config
from gpualert_slurm.core.spool import (
    SpoolError,
    job_dir,
    latest_attempt,
    open_attempt,
)
from gpualert_slurm.core.verdict import VerdictRecord, read_at


class ShowError(RuntimeError):
    """str() says what is wrong and what to do."""


def load_verdict(spool: str, jobid: str, attempt: int | None = None) -> VerdictRecord:
    if not jobid.isdigit():
        raise ShowError(f"gpualert show: bad job id {jobid!r}: expected a number such as 1234 "
                        "(for an array task, its own job id: see `sacct -j ARRAY -o JobIDRaw`)")
    path = job_dir(spool, jobid)
    if not os.path.isdir(path):
        raise ShowError(f"gpualert show: job {jobid} has no directory in {spool}: it was not "
                        "monitored (--gpualert), or its spool dir was cleaned up")
    n = latest_attempt(path) if attempt is None else attempt
    try:
        # the same check of the job's dirs as every root reader (uid: the dir's owner; root
        # reading it still refuses a dir a user made 0755, or linked)
        d = open_attempt(spool, jobid, None, n)
        try:
            # The epilog writes verdict.json as root: a file of anyone else is not ours.
            v = read_at(d.attempt_fd, owners=(0,))
        finally:
            d.close()
        # a root-owned verdict the user moved in from another job or attempt is not this one's
        if str(v.job_id) != jobid or v.attempt != n:
            raise ShowError(f"gpualert show: {path}: the verdict.json at attempt {n} is job "
                            f"{v.job_id}'s attempt {v.attempt}, not job {jobid}'s: refused "
                            "(moved in from elsewhere)")
        return v
    except FileNotFoundError:
        raise ShowError(f"gpualert show: job {jobid} (attempt {n}) has no verdict.json yet: the "
                        "job is still running, or its job epilog has not run (is "
                        "EpilogSlurmctld set? see `gpualert doctor`)") from None
    except PermissionError:
        raise ShowError(f"gpualert show: {path}: permission denied: only the job's user and "
                        "root can read its report") from None
    except SpoolError as e:
        raise ShowError(f"gpualert show: {e}") from None


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="gpualert show",
                                description="print the report of a finished job")
    p.add_argument("jobid")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="the verdict.json record")
    fmt.add_argument("--html", action="store_true", help="the HTML part of the mail")
    p.add_argument("--attempt", type=int, default=None,
                   help="which run of a requeued job (default: the latest)")
    a = p.parse_args(argv)
    try:
        cfg = load_config()
        os.environ.setdefault("GPUALERT_TEMPLATES", cfg.report.templates)
        v = load_verdict(cfg.spool, a.jobid, a.attempt)
    except (ConfigError, ShowError) as e:
        print(e, file=sys.stderr)
        return 1
    if a.json:
        print(v.dumps())
        return 0
    from gpualert_slurm.report import render

    sys.stdout.write(render(v, "html" if a.html else "text"))
    return 0
