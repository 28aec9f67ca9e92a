"""Family `torchcases`: real CPU PyTorch failures (progs/torchfail.py).

NaN divergence in real training loops, DataLoader workers killed / crashing / exiting, corrupt
checkpoints loaded with torch.load, and tensors on two devices (cpu vs meta).
"""

from __future__ import annotations

from common import prog, run_parallel, shown, single
from local import _workdir

PREFIXES = ("nan-", "dl-", "ckpt-", "devmm-")
PLAN = [("nan", "nan_divergence", "nan_divergence", 35),
        ("dl", "dataloader_worker", "dataloader_worker", 32),
        ("dl-raise", "python_exception", "dataloader_raise", 3),
        ("ckpt", "checkpoint_corrupt", "checkpoint_corrupt", 32),
        ("devmm", "device_mismatch", "device_mismatch", 33)]


def _case(case_id: str, cls: str, kind: str, variant: int):
    def job() -> dict | None:
        wd = _workdir(case_id)
        cmd = prog("torchfail", kind, variant, case_id, wd)
        lab = single(case_id, cls, cmd, shown=shown(cmd), cwd=wd, timeout=180)
        if lab["exit_code"] in (0, 3):  # the failure did not happen: not a case
            print(f"corpus: {case_id}: no {cls} reproduced (exit {lab['exit_code']}); dropped")
            return None
        return lab
    job.case_id = case_id
    return job


def cases() -> list:
    return [_case(f"{pre}-{i:02d}", cls, kind, i) for pre, cls, kind, n in PLAN
            for i in range(n)]


def generate(workers: int = 2) -> list[dict]:
    return [lab for lab in run_parallel(cases(), workers=workers) if lab]
