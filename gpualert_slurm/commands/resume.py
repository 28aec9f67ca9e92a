"""`gpualert resume` (recovery/commands.py)."""

from gpualert_slurm.recovery.commands import resume_main as main

__all__ = ["main"]
