"""`gpualert hook prolog|epilog|epilog-slurmctld|queue`: run as root by Slurm through the shims
in epilog.d/ (`queue`: the worker of the hooks' queue on this host, hooks/queue.py). Whatever
happens, a hook returns 0: a non-zero Prolog/Epilog drains the node (hooks/run_hook.py).

prolog (prolog.py), epilog (node_epilog.py) and epilog-slurmctld (job_epilog/) stand on
jobspool.py (the job's spool dir and task logs, opened as root), classify_child.py (the
classifier in a forked child), run_hook.py and common.py (log, watchdog); neither epilog
imports the other."""

from __future__ import annotations

import sys

HOOKS = ("prolog", "epilog", "epilog-slurmctld", "queue")
# `hook drain` was `hook queue`'s name: a shim kept from an older version (a conffile the admin
# edited is not replaced on upgrade) still starts the worker by it
OLD_NAMES = {"drain": "queue"}


def main(argv: list[str]) -> int:
    if len(argv) == 1:
        argv = [OLD_NAMES.get(argv[0], argv[0])]
    if len(argv) != 1 or argv[0] not in HOOKS:
        if argv and argv[0] in ("-h", "--help"):
            print(f"usage: gpualert hook {{{'|'.join(HOOKS)}}}  (run by Slurm as root)")
            return 0
        print(f"gpualert hook: expected one of {', '.join(HOOKS)}; got {argv!r}", file=sys.stderr)
        return 2
    if argv[0] == "queue":  # the hooks' queue (epilog.d/*: each shim may start its worker)
        from gpualert_slurm.hooks import queue

        return queue.main()
    if argv[0] == "prolog":
        from gpualert_slurm.hooks import prolog

        return prolog.run()
    if argv[0] == "epilog":
        from gpualert_slurm.hooks import node_epilog

        return node_epilog.run()
    from gpualert_slurm.hooks import job_epilog

    return job_epilog.run()
