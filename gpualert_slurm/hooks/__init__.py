"""`gpualert hook prolog|epilog|epilog-slurmctld`: run as root by Slurm through the shims in
epilog.d/. Whatever happens, a hook returns 0: a non-zero Prolog/Epilog drains the node."""

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
    from gpualert_slurm.hooks import epilog

    return epilog.run(argv[0])
