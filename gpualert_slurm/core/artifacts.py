"""What a report attaches, under one non-silent budget: the task logs first (gzip; a huge log cut
to head and tail with a note), then the job's artifact files, smallest first. Every file left out
is named with its size, the reason, and where it stays on disk.

Artifact files are found and read in a forked child that has dropped to the job user's uid/gid:
root never reads a file the user could not. The child also refuses any match whose real path
leaves the job's work dir, so a symlink planted there cannot reach another of the user's files
outside the job either.
"""

from __future__ import annotations

import glob
import gzip
import os
import pickle
import select
import signal
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

HEAD_TAIL_BYTES = 512 * 1024  # kept at each end of a log too big to attach whole
MAX_MATCHES = 1000  # per job: a glob like ** on a dataset dir must not run for ever


@dataclass
class Attachment:
    filename: str
    data: bytes
    mime: str


@dataclass
class Bundle:
    budget: int
    used: int = 0
    attached: list[dict[str, Any]] = field(default_factory=list)
    left_out: list[dict[str, Any]] = field(default_factory=list)
    files: list[Attachment] = field(default_factory=list)

    def manifest(self) -> dict[str, Any]:
        return {"budget": self.budget, "used": self.used, "attached": self.attached,
                "left_out": self.left_out}

    def left(self) -> int:
        return self.budget - self.used

    def add(self, kind: str, name: str, size: int, data: bytes, mime: str,
            note: str | None = None) -> None:
        self.used += len(data)
        self.files.append(Attachment(name, data, mime))
        self.attached.append({"kind": kind, "name": name, "size": size,
                              "attached_size": len(data), "note": note})

    def skip(self, kind: str, name: str, size: int | None, reason: str, where: str) -> None:
        self.left_out.append({"kind": kind, "name": name, "size": size, "reason": reason,
                              "where": where})


def _read_fd(fd: int, offset: int, n: int) -> bytes:
    out = []
    while n > 0:
        b = os.pread(fd, min(n, 1 << 20), offset)
        if not b:
            break
        out.append(b)
        offset += len(b)
        n -= len(b)
    return b"".join(out)


def log_payload(fd: int, size: int, path: str, cut_above: int) -> tuple[bytes, str | None]:
    """The log's bytes, or its head and tail with a note in between when it is over
    `cut_above` bytes (the note says how much was cut and where the whole log is)."""
    if size <= cut_above:
        return _read_fd(fd, 0, size), None
    head = _read_fd(fd, 0, HEAD_TAIL_BYTES)
    tail = _read_fd(fd, max(size - HEAD_TAIL_BYTES, 0), HEAD_TAIL_BYTES)
    cut = size - len(head) - len(tail)
    note = f"cut to its first and last {HEAD_TAIL_BYTES >> 10} KiB ({cut} bytes left out)"
    mark = (f"\n[gpualert: {cut} bytes cut here; the whole log is {path}]\n").encode()
    return head + mark + tail, note


def add_logs(bundle: Bundle, logs: list[Any]) -> None:
    """Task logs (hooks.jobspool.TaskLog: fd, size, name, path), each gzip'd, in rank order.
    A log over a quarter of the budget is cut to head and tail first."""
    cut_above = max(bundle.budget // 4, 2 * HEAD_TAIL_BYTES + 1)
    for t in sorted(logs, key=lambda t: (t.step != "batch", t.step, t.rank)):
        try:
            raw, note = log_payload(t.fd, t.size, t.path, cut_above)
        except OSError as e:
            bundle.skip("log", t.name, t.size, f"could not be read: {e.strerror or e}", t.path)
            continue
        data = gzip.compress(raw, compresslevel=6, mtime=0)
        if len(data) > bundle.left():
            bundle.skip("log", t.name, t.size,
                        f"over the budget ({len(data)} bytes compressed, {bundle.left()} left)",
                        t.path)
            continue
        bundle.add("log", t.name + ".gz", t.size, data, "application/gzip", note)


# ---- artifacts, read as the job's user ------------------------------------------------------

def _inside(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _child_collect(work_dir: str, globs: list[str], budget: int) -> dict[str, Any]:
    """Runs as the job's user: glob, check containment, read smallest first within budget."""
    root = os.path.realpath(work_dir)
    found: dict[str, tuple[str, int]] = {}
    skipped: list[dict[str, Any]] = []
    for pattern in globs:
        pat = pattern if os.path.isabs(pattern) else os.path.join(work_dir, pattern)
        matches = sorted(glob.glob(pat, recursive=True))
        if not matches:
            skipped.append({"name": pattern, "size": None, "where": pat,
                            "reason": "the glob matched no file the job's user can see"})
        for match in matches[:MAX_MATCHES]:
            rel = os.path.relpath(match, work_dir)
            real = os.path.realpath(match)
            if not _inside(real, [root]):
                skipped.append({"name": rel, "size": None, "where": match,
                                "reason": "refused: a symlink or path out of the job's work dir"})
                continue
            try:
                st = os.stat(real)
            except OSError as e:
                skipped.append({"name": rel, "size": None, "where": match,
                                "reason": f"cannot be read: {e.strerror}"})
                continue
            if not os.path.isfile(real):
                continue  # directories and devices matched by a glob are not artifacts
            if real not in found:
                found[real] = (rel, st.st_size)
    taken: list[dict[str, Any]] = []
    left = budget
    for real, (rel, size) in sorted(found.items(), key=lambda kv: (kv[1][1], kv[1][0])):
        if size > left:
            skipped.append({"name": rel, "size": size, "where": real,
                            "reason": f"over the budget ({left} bytes left)"})
            continue
        try:
            fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                data = _read_fd(fd, 0, size + 1)
            finally:
                os.close(fd)
        except OSError as e:
            skipped.append({"name": rel, "size": size, "where": real,
                            "reason": f"cannot be read as the job's user: {e.strerror}"})
            continue
        if len(data) > left:
            skipped.append({"name": rel, "size": len(data), "where": real,
                            "reason": f"grew past the budget ({left} bytes left)"})
            continue
        left -= len(data)
        taken.append({"name": rel, "size": len(data), "data": data})
    return {"taken": taken, "skipped": skipped}


class Forked:
    """fn() started now in a forked child (as uid/gid when given: no supplementary group but
    gid); result() collects its pickled return value through a pipe, within a bound."""

    def __init__(self, fn: Callable[[], Any], uid: int | None = None,
                 gid: int | None = None) -> None:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: never returns into the caller's code
            code = 0
            try:
                os.close(r)
                if uid is not None and gid is not None:
                    os.setgroups([gid])
                    os.setgid(gid)
                    os.setuid(uid)
                    if os.getuid() != uid or (uid != 0 and os.geteuid() == 0):
                        raise PermissionError("could not drop privileges")
                out: Any = ("ok", fn())
            except BaseException as e:  # noqa: BLE001 - everything goes back to the parent
                out = ("error", f"{type(e).__name__}: {e}")
                code = 1
            try:
                with os.fdopen(w, "wb") as f:
                    f.write(pickle.dumps(out))
            finally:
                os._exit(code)
        os.close(w)
        self.pid, self.fd = pid, r

    def cancel(self) -> None:
        if self.pid:
            with suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
            with suppress(OSError):
                os.waitpid(self.pid, 0)
            with suppress(OSError):
                os.close(self.fd)
            self.pid = 0

    def result(self, timeout_s: float) -> Any:
        """The child's return value. TimeoutError past timeout_s (the child is killed);
        RuntimeError for whatever went wrong in the child."""
        chunks: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"took more than {timeout_s:g} s")
                ready, _, _ = select.select([self.fd], [], [], left)
                if not ready:
                    continue
                b = os.read(self.fd, 1 << 20)
                if not b:
                    break
                chunks.append(b)
        finally:
            self.cancel()
        try:
            # The pickle comes from our own forked code (no one else can write to this pipe).
            kind, value = pickle.loads(b"".join(chunks))
        except Exception as e:
            raise RuntimeError(f"no answer from the child: {e}") from None
        if kind != "ok":
            raise RuntimeError(value)
        return value


def run_forked(fn: Callable[[], Any], timeout_s: float, uid: int | None = None,
               gid: int | None = None) -> Any:
    """fn() in a forked child, bounded (see Forked)."""
    return Forked(fn, uid, gid).result(timeout_s)


def collect_as_user(uid: int, gid: int, work_dir: str, globs: list[str], budget: int,
                    timeout_s: float) -> dict[str, Any]:
    """Glob and read the artifacts as the job's user, in a child; {"error"} when that fails."""
    try:
        return run_forked(lambda: _child_collect(work_dir, globs, budget), timeout_s, uid, gid)
    except TimeoutError as e:
        return {"error": f"collecting artifacts {e}"}
    except RuntimeError as e:
        return {"error": str(e)}


def add_artifacts(bundle: Bundle, uid: int, gid: int, work_dir: str | None,
                  globs: list[str], timeout_s: float) -> None:
    if not globs:
        return
    if not work_dir or not os.path.isabs(work_dir):
        for g in globs:
            bundle.skip("artifact", g, None, "the job's work dir is not known", "?")
        return
    res = collect_as_user(uid, gid, work_dir, globs, max(bundle.left(), 0), timeout_s)
    if "error" in res:
        for g in globs:
            bundle.skip("artifact", g, None, f"not collected: {res['error']}", work_dir)
        return
    for item in res["taken"]:
        data = item["data"]
        bundle.add("artifact", item["name"], item["size"], data, _mime(item["name"]))
    for item in res["skipped"]:
        bundle.skip("artifact", item["name"], item["size"], item["reason"], item["where"])


def _mime(name: str) -> str:
    if name.endswith((".txt", ".log", ".out", ".err", ".csv", ".json", ".yaml", ".yml")):
        return "text/plain"
    if name.endswith(".png"):
        return "image/png"
    return "application/octet-stream"


def bundle_for_job(logs: list[Any], budget: int, uid: int, gid: int, work_dir: str | None,
                   globs: list[str], timeout_s: float) -> Bundle:
    """Logs first, then artifacts, all under `budget` bytes."""
    b = Bundle(budget=budget)
    add_logs(b, logs)
    add_artifacts(b, uid, gid, work_dir, globs, timeout_s)
    return b
