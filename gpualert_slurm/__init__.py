"""gpualert-slurm: tells the owner of a failed Slurm GPU job why it failed."""

__version__ = "0.1.0"
