"""The recovery audit log: append-only JSON lines, each fsynced before the action it announces,
and the lock that makes one decision at a time (two job epilogs never decide from the same
history, so the breaker and the retry counts see every earlier decision).

Events: decision (what the policy said, before anything is done), action (about to act on a
target, with the node's or job's state before), result (what came of it), outcome (the
decision's end: completed, recorded, abandoned), breaker (opened or reset), resume (an admin
resumed a node). The log is root's (0600): evidence lines come from users' logs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from typing import Any

from gpualert_slurm.core.config import Config

TAIL_BYTES = 8 * 1024 * 1024  # history read back for decisions: windows are hours, not years


def audit_path(cfg: Config) -> str:
    return cfg.recovery.audit_log or os.path.join(cfg.spool, ".gpualert", "recovery",
                                                  "audit.jsonl")


class AuditLog:
    def __init__(self, path: str) -> None:
        self.path = path

    def _ensure_dir(self) -> None:
        d = os.path.dirname(self.path)
        os.makedirs(d, mode=0o700, exist_ok=True)

    def append(self, record: dict[str, Any], *more: dict[str, Any]) -> dict[str, Any]:
        """Write the record (and `more`) as lines, one write and one fsync; returns the first
        record (with its time)."""
        now = time.time()
        recs = [{"time": now, **r} for r in (record, *more)]
        self._ensure_dir()
        data = "".join(json.dumps(r, sort_keys=True, default=str) + "\n" for r in recs).encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        return recs[0]

    def read(self, tail_bytes: int | None = TAIL_BYTES) -> list[dict[str, Any]]:
        """The records, oldest first; a torn or foreign line is skipped, never fatal."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return []
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if tail_bytes is not None and size > tail_bytes:
                f.seek(size - tail_bytes)
                f.readline()  # a partial first line
            data = f.read()
        out = []
        for line in data.splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
        return out

    @contextlib.contextmanager
    def locked(self, timeout_s: float) -> Iterator[bool]:
        """Hold the decision lock; yields False (not held) when it did not come within
        timeout_s, and the caller then fails open."""
        self._ensure_dir()
        fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            deadline = time.monotonic() + timeout_s
            held = False
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    held = True
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(0.05)
            yield held
        finally:
            os.close(fd)


def decision_state(records: list[dict[str, Any]], decision_id: str
                   ) -> tuple[dict[str, Any] | None, dict[tuple[str, str], str], str | None]:
    """For one decision id: its decision record, {(action, target): last result outcome},
    and its outcome (None while unfinished)."""
    dec, results, outcome = None, {}, None
    for r in records:
        if r.get("id") != decision_id:
            continue
        ev = r.get("event")
        if ev == "decision" and dec is None:
            dec = r
        elif ev == "result":
            results[(str(r.get("action")), str(r.get("target")))] = str(r.get("outcome"))
        elif ev == "outcome":
            outcome = str(r.get("outcome"))
    return dec, results, outcome


def breaker_open(records: list[dict[str, Any]], partition: str,
                 node_set: tuple[str, ...] | list[str] = ()) -> dict[str, Any] | None:
    """The record that opened the partition's breaker, if no reset came after it. A breaker
    belongs to a node set: one opened under another partition name over the same nodes is
    this partition's too."""
    state = None
    nodes = sorted(node_set)
    for r in records:
        if r.get("event") != "breaker":
            continue
        opened_as = state.get("partition") if state else None
        if r.get("partition") in (partition, "*", opened_as) or (
                nodes and sorted(r.get("node_set") or []) == nodes):
            # (a reset under the name the breaker was opened with closes it for every name)
            state = r if r.get("state") == "open" else None
    return state


def open_breakers(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    parts = {str(r.get("partition")) for r in records if r.get("event") == "breaker"}
    out = {}
    for p in parts - {"*"}:
        b = breaker_open(records, p)
        if b is not None:
            out[p] = b
    return out
