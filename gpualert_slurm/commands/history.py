"""`gpualert history` (recovery/commands.py)."""

from gpualert_slurm.recovery.commands import history_main as main

__all__ = ["main"]
