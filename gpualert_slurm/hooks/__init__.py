"""`gpualert hook prolog|epilog|epilog-slurmctld`: run as root by Slurm through the shims in
epilog.d/. Whatever happens, a hook returns 0: a non-zero Prolog/Epilog drains the node
(hooks/run_hook.py).

prolog (prolog.py), epilog (node_epilog.py) and epilog-slurmctld (job_epilog/) stand on
jobspool.py (the job's spool dir and task logs, opened as root), classify_child.py (the
classifier in a forked child), run_hook.py and common.py (log, watchdog); neither epilog
imports the other."""

from __future__ import annotations

import sys

HOOKS = ("prolog", "epilog", "epilog-slurmctld", "drain")


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in HOOKS:
        if argv and argv[0] in ("-h", "--help"):
            print(f"usage: gpualert hook {{{'|'.join(HOOKS)}}}  (run by Slurm as root)")
            return 0
        print(f"gpualert hook: expected one of {', '.join(HOOKS)}; got {argv!r}", file=sys.stderr)
        return 2
    if argv[0] == "drain":  # the job epilogs' queue (epilog.d/gpualert-epilog-slurmctld)
        from gpualert_slurm.hooks import drain

        return drain.main()
    if argv[0] == "prolog":
        from gpualert_slurm.hooks import prolog

        return prolog.run()
    if argv[0] == "epilog":
        from gpualert_slurm.hooks import node_epilog

        return node_epilog.run()
    from gpualert_slurm.hooks import job_epilog

    return job_epilog.run()
