"""The documented GPU failure formats (corpus/gen/compose/tuning_gpu.py) classify as their class.

No GPU here, so the logs are composed from the format strings PyTorch, NCCL and the NVIDIA driver
use (sources in corpus/README.md); every template and era is drawn over many seeds.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from gpualert_slurm.classify import JobFacts, TaskInput, classify, load_rules

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from corpus.gen.compose import tuning_gpu as syn  # noqa: E402  (needs the repo on the path)

RULES = load_rules(site=False)
SEEDS = range(40)


def verdict(tmp_path: Path, lines: list[str], kernel: list[str] | None = None):
    log = tmp_path / "0.0.log"
    log.write_text("\n".join(lines) + "\n")
    klog = None
    if kernel is not None:
        (tmp_path / "kernel.log").write_text("\n".join(kernel) + "\n")
        klog = str(tmp_path / "kernel.log")
    t = TaskInput(str(log), rank=0, step="0", exit_code=1)
    return classify([t], JobFacts(exit_code=1, kernel_log=klog), RULES)


@pytest.mark.parametrize("maker,cls", [
    (syn.m_cuda_oom, "cuda_oom"), (syn.m_cuda_error, "cuda_error"),
    (syn.m_device_assert, "cuda_device_assert"), (syn.m_cuda_setup, "cuda_setup")])
def test_every_template_of_a_class_is_recognised(tmp_path, maker, cls):
    hows = set()
    for seed in SEEDS:
        body, how = maker(random.Random(f"t-{cls}-{seed}"))
        hows.add(how.split(":")[0])
        v = verdict(tmp_path, body)
        assert v.cls == cls, f"{how}: {v.cls} ({v.detail})"
    assert len(hows) >= 3  # the seeds really cover several templates


def test_nccl_errors_are_nccl_errors(tmp_path):
    for seed in SEEDS:
        body, how = syn.m_nccl(random.Random(f"t-nccl-{seed}"), "gpu-n001", seed % 16)
        v = verdict(tmp_path, body)
        assert v.cls == "nccl_error", f"{how}: {v.cls} ({v.detail})"


def test_xid_in_the_kernel_log_overrides_the_tasks_cuda_error(tmp_path):
    for seed in SEEDS:
        body, how, kern = syn.m_hw(random.Random(f"t-hw-{seed}"), "gpu-n002", syn.BASE_T)
        assert verdict(tmp_path, body, kern).cls == "gpu_hardware", how
        if body[-1].startswith("Segmentation"):
            continue
        # without the kernel's view the same task log is only a CUDA error (or ECC in the text)
        assert verdict(tmp_path, body).cls in ("cuda_error", "gpu_hardware"), how


def test_watchdog_timeout_in_every_era_is_a_collective_timeout(tmp_path):
    eras = set()
    for seed in SEEDS:
        lines = syn.watchdog(random.Random(f"t-wd-{seed}"), 3, 1234, 600000)
        eras.add(lines[0].startswith("[rank3]:[E"))
        assert verdict(tmp_path, lines).cls == "collective_timeout", lines[0]
    assert eras == {True, False}


def test_cuda_error_ending_in_c10_distbackenderror_is_the_cuda_error(tmp_path):
    """The watchdog thread rethrows a kernel fault as c10::DistBackendError: the type name in the
    terminate line must not turn it into an NCCL failure."""
    exc = ("[PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread terminated with "
           "exception: CUDA error: an illegal memory access was encountered")
    lines = ["step 10 | loss 2.0", "[rank3]:[E1129 17:05:47.123456789 ProcessGroupNCCL.cpp:1515] "
             + exc, syn.ASYNC_HINT, syn.DSA_HINT, "",
             "terminate called after throwing an instance of 'c10::DistBackendError'",
             "  what():  " + exc]
    assert verdict(tmp_path, lines).cls == "cuda_error"


@pytest.mark.parametrize("status", ["CUDNN_STATUS_MAPPING_ERROR", "CUDNN_STATUS_NOT_SUPPORTED. "
                                    "This error may appear if you passed in a non-contiguous "
                                    "input.", "CUDNN_STATUS_BAD_PARAM"])
def test_any_cudnn_status_is_a_cuda_error(tmp_path, status):
    body = syn.traceback(random.Random(status), f"RuntimeError: cuDNN error: {status}")
    assert verdict(tmp_path, body).cls == "cuda_error"


def test_cudnn_alloc_failure_is_out_of_memory(tmp_path):
    body = syn.traceback(random.Random(1), "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED")
    assert verdict(tmp_path, body).cls == "cuda_oom"


def test_fmt_size_follows_c10_format_size():
    assert syn.fmt_size(1024) == "1024 bytes"
    assert syn.fmt_size(1536) == "1.50 KiB"
    assert syn.fmt_size(20 * syn.MIB) == "20.00 MiB"
    assert syn.fmt_size(syn.GIB) == "1024.00 MiB"
    assert syn.fmt_size(3 * syn.GIB // 2) == "1.50 GiB"
