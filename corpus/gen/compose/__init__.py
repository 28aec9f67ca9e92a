"""Composed (synthetic) cases: `build(root, d, c)` composes the case `c` of a set into `d`.

`kit.py` holds what every template shares; each module below holds one set's templates, found
by the prefix of the case's `synth` (the first prefix that matches wins).
"""

from __future__ import annotations

import importlib
from pathlib import Path

# (template prefix, module of this package); "" last: the tuning corpus's first templates
REGISTRY = (
    ("tuning_", "tuning_gpu"),  # the tuning corpus's GPU families (tuning_single, _cascade)
    ("s4_", "holdout4"),
    ("s5_", "tuning_s5"),  # the tuning corpus's composers after holdout4
    ("h5_", "holdout5"),
    ("h6_", "holdout6"),
    ("h7_", "holdout7"),
    ("h8_", "holdout8"),
    ("h9_", "holdout9"),
    ("f5_", "tuning_f5"),  # GPU wording families holdout5 showed unknown
    ("f6_", "tuning_f6"),  # memory / shm / GPU-backend families holdout6 missed
    ("f7m_", "tuning_f7m"),  # holdout7's misses: a collective timeout's straggler
    ("f7_", "tuning_f7"),  # Julia's uncaught errors (not in Debian: composed)
    ("f8_", "tuning_f8"),  # CUDA error names, GPU allocators, Horovod, containers
    ("f10m_", "tuning_f10m"),  # issue 22's GPU-only message families
    ("f11_", "tuning_f11"),  # issue 32: families the unseen real sets missed
    ("", "tuning"),
)


def build(root: Path, d: Path, c: dict) -> dict:
    """Compose the case `c` into its fresh directory `d` (under the set's `root`); its label."""
    mod = next(m for prefix, m in REGISTRY if c["synth"].startswith(prefix))
    return importlib.import_module(f"{__name__}.{mod}").build(root, d, c)
