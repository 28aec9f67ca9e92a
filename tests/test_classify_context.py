"""The family of classify/rules/15-context.yaml: lines that never decide but shadow weaker matches
on their line. A zero count of NaN or non-finite values (`benign_zero_count`) and JAX's probe of
a backend it does not have (`jax_backend_probe`) leave an exit-0 run a success; a warning raised
as an error (`warning_raised`) is the exception, not a warning. Pure logic over small written
logs."""

from __future__ import annotations

from pathlib import Path

import pytest
from classifylib import PROGRESS, TRAINING, log_alone, run_py, verdict

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


# ---- benign CUDA probes must not outrank the failure after them (was: cuda_setup) ----

CUINIT = ("2026-03-04 05:06:07.123456: E tensorflow/compiler/xla/stream_executor/cuda/"
          "cuda_driver.cc:268] failed call to cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable "
          "device is detected\n")
DSO = ("2026-03-04 05:06:06.000001: W tensorflow/stream_executor/platform/default/"
       "dso_loader.cc:64] Could not load dynamic library 'libcudart.so.11.0'; dlerror: "
       "libcudart.so.11.0: cannot open shared object file: No such file or directory\n")


@pytest.mark.parametrize("after,cls", [
    ("Traceback (most recent call last):\n  File \"prep.py\", line 40, in <module>\n"
     "    x = np.zeros((n, d))\nnumpy.core._exceptions._ArrayMemoryError: Unable to allocate "
     "381. GiB for an array with shape (200000, 256000) and data type float64\n", "host_oom"),
    ("Traceback (most recent call last):\n  File \"prep.py\", line 3, in <module>\n"
     "    import sklearn\nModuleNotFoundError: No module named 'sklearn'\n", "import_error"),
    ("Traceback (most recent call last):\n  File \"prep.py\", line 9, in <module>\n"
     "    buf = [0.0] * n\nMemoryError\n", "host_oom"),
])
def test_cuda_probe_noise_yields_to_the_real_failure(tmp_path: Path, after: str, cls: str
                                                     ) -> None:
    assert log_alone(tmp_path, DSO + CUINIT + TRAINING + after) == cls
    assert verdict(tmp_path, CUINIT + TRAINING + after).cls == cls


def test_cuda_probe_alone_still_explains_a_failed_job(tmp_path: Path) -> None:
    v = verdict(tmp_path, TRAINING + CUINIT)
    assert v.cls == "cuda_setup" and v.confidence < 0.7
