"""Shared pieces of the corpus generators: capture a real run the way the tap does, write labels.

The capture helper mirrors the tap's contract (docs/CONTRACTS.md): one pipe carries the child's
stdout and stderr, every byte goes to the log unchanged and as soon as it arrives (so the log's
mtime is the heartbeat), and an `.exit` record holds the raw wait status decoded into
exit_code / signal / core_dumped / end_time.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent
CASES = CORPUS / "cases"
LABELS = CORPUS / "labels.jsonl"
GEN = Path(__file__).resolve().parent
PROGS = GEN / "progs"
# Debian's python in a venv every user can read: jobs and the `nobody` runs use the same copy.
PY = os.environ.get("CORPUS_PYTHON", "/opt/gpualert/corpus-venv/bin/python")


def case_dir(case_id: str) -> Path:
    """A fresh, empty directory for one case (the generators own and rebuild their cases)."""
    d = CASES / case_id
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    return d


def _decode(status: int) -> tuple[int | None, int | None, bool]:
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status), bool(os.WCOREDUMP(status))
    return os.WEXITSTATUS(status), None, False


class Running:
    """One child whose output is being copied to a log; `wait()` gives its exit record."""

    def __init__(self, cmd: Sequence[str], log: Path, *, step: str = "run", rank: int = 0,
                 node: str | None = None, env: dict[str, str] | None = None,
                 cwd: str | Path | None = None, stdin_data: bytes | None = None,
                 preexec=None) -> None:
        self.log, self.step, self.rank, self.node = Path(log), step, rank, node
        full_env = dict(os.environ)
        full_env.pop("PYTHONFAULTHANDLER", None)
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
            env=full_env, cwd=cwd, start_new_session=True, preexec_fn=preexec)
        if stdin_data is not None:
            self.proc.stdin.write(stdin_data)
            self.proc.stdin.close()
        self.status: int | None = None
        self.end_time: float | None = None
        self._copier = threading.Thread(target=self._copy, daemon=True)
        self._copier.start()

    def _copy(self) -> None:
        fd = self.proc.stdout.fileno()
        # Unbuffered: each chunk lands (and bumps the mtime) when the child writes it.
        with open(self.log, "wb", buffering=0) as out:
            while chunk := os.read(fd, 65536):
                out.write(chunk)

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def poll(self) -> bool:
        if self.status is None:
            pid, status = os.waitpid(self.proc.pid, os.WNOHANG)
            if pid:
                self.status, self.end_time = status, time.time()
                self.proc.returncode = 0  # keep Popen from reaping it again
        return self.status is not None

    def wait(self, timeout: float | None = None, kill_signal: int = signal.SIGTERM,
             kill_after: float = 10.0) -> dict:
        """Wait for the child; past `timeout` send `kill_signal` to its group, then SIGKILL."""
        deadline = None if timeout is None else time.time() + timeout
        sent = None
        while not self.poll():
            now = time.time()
            if deadline is not None and now > deadline and sent is None:
                self.signal_group(kill_signal)
                sent = now
            elif sent is not None and now > sent + kill_after:
                self.signal_group(signal.SIGKILL)
            time.sleep(0.05)
        self._copier.join(timeout=10)
        return self.record()

    def record(self) -> dict:
        code, sig, core = _decode(self.status)
        rec = {"node": self.node, "step": self.step, "rank": self.rank, "pid": self.proc.pid,
               "exit_code": code, "signal": sig, "core_dumped": core,
               "end_time": round(self.end_time, 3), "status": self.status}
        self.log.with_suffix(".exit").write_text(json.dumps(rec) + "\n")
        return rec


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
