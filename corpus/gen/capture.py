"""Capture a real run the way the tap does, and write labels.

One pipe carries the child's stdout and stderr, every byte goes to the log unchanged and as soon
as it arrives (so the log's mtime is the heartbeat), and an `.exit` record holds the raw wait
status decoded into exit_code / signal / core_dumped / end_time (docs/CONTRACTS.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path


def decode(status: int) -> tuple[int | None, int | None, bool]:
    """(exit_code, signal, core_dumped) of a raw wait status."""
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
        self.stopped_by: str | None = None
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

    def silent_for(self) -> float:
        try:
            return time.time() - self.log.stat().st_mtime
        except FileNotFoundError:
            return 0.0

    def wait(self, timeout: float | None = None, kill_signal: int = signal.SIGTERM,
             kill_after: float = 10.0, silence_kill: float | None = None,
             kill_at: float | None = None) -> dict:
        """Wait for the child. Past `timeout`, after `silence_kill` seconds without output, or
        `kill_at` seconds after the start, send `kill_signal` to its group (then SIGKILL)."""
        t0 = time.time()
        deadline = None if timeout is None else t0 + timeout
        sent = None
        while not self.poll():
            now = time.time()
            why = ("timeout" if deadline is not None and now > deadline else
                   "kill_at" if kill_at is not None and now > t0 + kill_at else
                   "silence" if (silence_kill is not None and now - t0 > 2
                                 and self.silent_for() > silence_kill) else None)
            if why and sent is None:
                self.stopped_by = why  # a run stopped by the timeout is no case of its class
                self.signal_group(kill_signal)
                sent = now
            elif sent is not None and now > sent + kill_after:
                self.signal_group(signal.SIGKILL)
            time.sleep(0.05)
        self._copier.join(timeout=10)
        return self.record()

    def record(self) -> dict:
        code, sig, core = decode(self.status)
        rec = {"node": self.node, "step": self.step, "rank": self.rank, "pid": self.proc.pid,
               "exit_code": code, "signal": sig, "core_dumped": core,
               "end_time": round(self.end_time, 3), "status": self.status}
        self.log.with_suffix(".exit").write_text(json.dumps(rec) + "\n")
        return rec


def task_entry(root: Path, d: Path, rec: dict, log_name: str | None = None) -> dict:
    """A label's task entry; the log path is relative to the set's root."""
    name = log_name or f"{rec['step']}.{rec['rank']}.log"
    return {"log": str((d / name).relative_to(root)), "rank": rec["rank"],
            "node": rec["node"], "step": rec["step"], "exit_code": rec["exit_code"],
            "signal": rec["signal"], "core_dumped": rec["core_dumped"],
            "end_time": rec["end_time"]}


def label(case_id: str, cls: str, tasks: list[dict], *, command: str, source: str = "reproduced",
          how: str | None = None, root_rank: int | None = None, exit_code: int | None = None,
          signal_: int | None = None, slurm_state: str | None = None,
          slurm_reason: str | None = None, hang_threshold_s: float | None = None,
          silence_s: float | None = None, kernel_log: str | None = None,
          transform: str | None = None) -> dict:
    """One labels.jsonl object with the fields docs/CLASSIFY-API.md names (+ the transform)."""
    out = {"id": case_id, "class": cls, "root_rank": root_rank, "source": source,
           "command": command, "how": how, "exit_code": exit_code, "signal": signal_,
           "slurm_state": slurm_state, "slurm_reason": slurm_reason,
           "hang_threshold_s": hang_threshold_s, "silence_s": silence_s, "tasks": tasks,
           "kernel_log": kernel_log}
    if transform:
        out["transform"] = transform
    return out
