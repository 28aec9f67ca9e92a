"""The family of classify/rules/15-context.yaml: lines that never decide but shadow weaker matches
on their line. A zero count of NaN or non-finite values (`benign_zero_count`) and JAX's probe of
a backend it does not have (`jax_backend_probe`) leave an exit-0 run a success; a warning raised
as an error (`warning_raised`) is the exception, not a warning. Pure logic over small written
logs."""

from __future__ import annotations

from pathlib import Path

import pytest
from classifylib import PROGRESS, run_py, verdict

from gpualert_slurm.classify import (
    JobFacts,
    classify,
)


def test_jax_backend_probe_logged_then_success(tmp_path: Path) -> None:
    text = ("INFO:2026-11-30 10:00:01,2:jax._src.xla_bridge:Unable to initialize backend 'rocm': "
            "module 'jaxlib.xla_extension' has no attribute 'GpuAllocatorConfig'\n"
            + PROGRESS + "saved\n")
    assert verdict(tmp_path, text, exit_code=0).cls == "success"


@pytest.mark.parametrize("line", [
    "step {i} grad guard: 0 non-finite values in 3.1M params",
    "step {i}: found 0 NaN in activations, 0 Inf in logits",
    "step {i} nan: 0 inf: 0 loss 0.41",
    "step {i} NaN/Inf: 0 (checked 12 tensors)",
    "step {i} zero NaNs in the gradients",
    "step {i} non-finite=0 loss=0.52",
])
def test_zero_counts_of_nan_stay_a_success(tmp_path, line):
    text = "".join(line.format(i=i) + "\n" for i in range(5)) + "done, checkpoint saved\n"
    v = verdict(tmp_path, text, exit_code=0)
    assert v.cls == "success", (v.cls, v.detail)


# ---- the two known weaknesses of the last stop -------------------------------------------------

def test_warning_raised_as_an_error_is_the_exception_not_a_warning(tmp_path):
    t = run_py(tmp_path, """
        import warnings
        warnings.warn("old api", DeprecationWarning)
        """, "-W", "error::DeprecationWarning")
    assert t.exit_code == 1
    v = classify([t], JobFacts(exit_code=1))
    assert (v.cls, v.detail) == ("python_exception", "DeprecationWarning")
    # a printed warning (file:line: prefix) before a real error stays context
    t = run_py(tmp_path, "import warnings; warnings.warn('x is slow', UserWarning)\n"
               "raise KeyError('k')", name="1.log")
    assert classify([t], JobFacts(exit_code=1)).detail == "KeyError"
