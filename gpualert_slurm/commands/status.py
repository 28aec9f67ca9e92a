"""`gpualert status` (recovery/commands.py)."""

from gpualert_slurm.recovery.commands import status_main as main

__all__ = ["main"]
