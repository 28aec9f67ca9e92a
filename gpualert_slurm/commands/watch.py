"""`gpualert watch [--loop --interval S]`: hang and straggler alerts for running jobs, run on the
controller by a timer or a service. The watcher lives in recovery/watch.py, beside the recovery
policy it hands a hung job to (recovery.commands reads its heartbeats too); this module only
names the subcommand like the others."""

from __future__ import annotations

from gpualert_slurm.recovery import watch


def main(argv: list[str]) -> int:
    return watch.main(argv)
