"""Shared pieces of the corpus generators: capture a real run the way the tap does, write labels.

The capture helper mirrors the tap's contract (docs/CONTRACTS.md): one pipe carries the child's
stdout and stderr, every byte goes to the log unchanged and as soon as it arrives (so the log's
mtime is the heartbeat), and an `.exit` record holds the raw wait status decoded into
exit_code / signal / core_dumped / end_time.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent
CASES = CORPUS / "cases"
LABELS = CORPUS / "labels.jsonl"
GEN = Path(__file__).resolve().parent
# The failing programs live once, in the corpus generator library (corpus/gen/progs/).
PROGS = CORPUS / "gen" / "progs"
sys.path.insert(0, str(CORPUS.parent))
from corpus.gen.capture import Running  # noqa: E402  (the one capture helper)

# Debian's python in a venv every user can read: jobs and the `nobody` runs use the same copy.
PY = os.environ.get("CORPUS_PYTHON", "/opt/gpualert/corpus-venv/bin/python")


def case_dir(case_id: str) -> Path:
    """A fresh, empty directory for one case (the generators own and rebuild their cases)."""
    d = CASES / case_id
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    return d


def capture(cmd: Sequence[str], d: Path, *, step: str = "run", rank: int = 0,
            timeout: float | None = 120, **kw) -> dict:
    """Run one real command to its end, its output in `d/<step>.<rank>.log`."""
    kill_signal = kw.pop("kill_signal", signal.SIGTERM)
    r = Running(cmd, d / f"{step}.{rank}.log", step=step, rank=rank, **kw)
    return r.wait(timeout=timeout, kill_signal=kill_signal)


def task_entry(d: Path, rec: dict, log_name: str | None = None) -> dict:
    """A label's task entry; the log path is relative to corpus/."""
    name = log_name or f"{rec['step']}.{rec['rank']}.log"
    return {"log": str((d / name).relative_to(CORPUS)), "rank": rec["rank"],
            "node": rec["node"], "step": rec["step"], "exit_code": rec["exit_code"],
            "signal": rec["signal"], "core_dumped": rec["core_dumped"],
            "end_time": rec["end_time"]}


def label(case_id: str, cls: str, tasks: list[dict], *, command: str, source: str = "reproduced",
          how: str | None = None, root_rank: int | None = None, exit_code: int | None = None,
          signal_: int | None = None, slurm_state: str | None = None,
          slurm_reason: str | None = None, hang_threshold_s: float | None = None,
          silence_s: float | None = None, kernel_log: str | None = None) -> dict:
    """One labels.jsonl object with exactly the fields docs/CLASSIFY-API.md names."""
    return {"id": case_id, "class": cls, "root_rank": root_rank, "source": source,
            "command": command, "how": how, "exit_code": exit_code, "signal": signal_,
            "slurm_state": slurm_state, "slurm_reason": slurm_reason,
            "hang_threshold_s": hang_threshold_s, "silence_s": silence_s, "tasks": tasks,
            "kernel_log": kernel_log}


def single(case_id: str, cls: str, cmd: Sequence[str], *, shown: str | None = None,
           timeout: float | None = 120, **kw) -> dict:
    """Run one command as a one-task case and label it; the job's exit is the task's."""
    d = case_dir(case_id)
    rec = capture(cmd, d, timeout=timeout, **kw)
    return label(case_id, cls, [task_entry(d, rec)], command=shown or " ".join(cmd),
                 root_rank=None, exit_code=rec["exit_code"], signal_=rec["signal"])


def prog(name: str, *args: object) -> list[str]:
    """The command line of one of corpus/generate/progs/<name>.py."""
    return [PY, str(PROGS / f"{name}.py"), *map(str, args)]


def shown(cmd: Sequence[str]) -> str:
    """A command line as the label records it: paths relative to the repository."""
    text = " ".join(cmd)
    return text.replace(str(GEN.parent.parent) + "/", "").replace(PY, "python")


def run_parallel(jobs: list, workers: int = 2) -> list:
    """Run zero-argument callables on a small pool (the machine has two cores)."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futs = [pool.submit(j) for j in jobs]
        out = []
        for f in futs:
            try:
                out.append(f.result())
            except Exception as exc:  # one broken case must not lose the others
                print(f"corpus: case failed to generate: {exc!r}")
        return out
