"""`gpualert mailprog -s SUBJECT USER`: slurm.conf's MailProg, enriched with the job's verdict.
The MailProg lives in notify/mailprog.py, beside the outbox it sends through; this module only
names the subcommand like the others. The console script `gpualert-mailprog` (setup.cfg, the
packages) calls notify.mailprog.entry directly, since slurmctld gives MailProg no subcommand."""

from __future__ import annotations

from gpualert_slurm.notify import mailprog


def main(argv: list[str]) -> int:
    return mailprog.main(argv)
