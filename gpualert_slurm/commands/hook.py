"""`gpualert hook prolog|epilog|epilog-slurmctld|queue`: Slurm's Prolog/Epilog entry points, run
as root through the shims in epilog.d/. The hooks themselves, and the dispatch between them, are
the `hooks` package (hooks/__init__.py); this module only names the subcommand like the others.

`commands` and `hooks` share the top layer of .importlinter (`cli : commands : hooks`, siblings
that may import each other); `hooks` never imports `commands`, so the two stay acyclic."""

from __future__ import annotations

from gpualert_slurm import hooks


def main(argv: list[str]) -> int:
    return hooks.main(argv)
