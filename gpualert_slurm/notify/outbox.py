"""The outbox: messages waiting to be sent, one entry per (message, channel), on disk.

    <outbox>/                     owner root (or whoever runs the epilog), 0700
        <id>.eml                  the message as it will be sent (never rewritten)
        <id>.json                 its state: channel, recipients, attempts, last error, history
        quarantine/<id>.{eml,json}  given up on, with the reason; shown by `gpualert doctor`
        .flush.lock               held by one `gpualert flush` at a time

An entry exists once its .json is there (written after the .eml, both atomically and fsynced),
so a crash between the two leaves an orphan .eml that `flush` adopts. Whoever sends an entry
holds an flock on its .eml: `submit()` and `flush` never send the same entry twice at once.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import stat
import time
from collections.abc import Iterator
from typing import Any

from gpualert_slurm.core.spool import fsync_dir, read_bytes_nofollow, write_atomic

DIR_MODE = 0o700
FILE_MODE = 0o600
QUARANTINE = "quarantine"
LOCK_NAME = ".flush.lock"
MAX_MESSAGE_BYTES = 256 * 1024**2  # far above any report budget; refuses a runaway file
MAX_HISTORY = 20
_ID_RE = re.compile(r"^[0-9]{10,}-[A-Za-z0-9_]{1,40}-[A-Za-z0-9_-]{1,64}-[0-9a-f]{8}$")


class OutboxError(OSError):
    """The outbox cannot be used; str() says which path, what is wrong, and what to do."""


def _tag(text: str, limit: int = 40) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in text)[:limit] or "x"


def new_id(job_id: str, channel: str) -> str:
    return f"{time.time_ns()}-{_tag(job_id)}-{_tag(channel, 64)}-{os.urandom(4).hex()}"


def _describe(e: OSError) -> str:
    if e.errno == errno.ENOSPC:
        return "no space left on the device"
    if e.errno == errno.EDQUOT:
        return "disk quota exceeded"
    if e.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if e.errno == errno.EROFS:
        return "read-only file system"
    return e.strerror or str(e)


@contextlib.contextmanager
def _try_lock(fd: int) -> Iterator[bool]:
    """Yield whether an exclusive lock on `fd` was had without waiting (another process
    holds it: False); closes `fd` after the block."""
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


class Outbox:
    def __init__(self, path: str) -> None:
        self.path = path
        self.qpath = os.path.join(path, QUARANTINE)
        self._fd: int | None = None
        self._qfd: int | None = None

    # ---- opening -----------------------------------------------------------------------------

    def open(self, create: bool = True) -> Outbox:
        """Open (creating, if asked, the outbox itself but never its parent) and check that no
        one but its owner can read or write it: messages hold users' reports."""
        try:
            self._fd = self._open_dir(self.path, None, create)
            self._qfd = self._open_dir(QUARANTINE, self._fd, create, shown=self.qpath)
        except OutboxError:
            self.close()
            raise
        return self

    def _open_dir(self, path: str, dir_fd: int | None, create: bool,
                  shown: str | None = None) -> int:
        shown = shown or path
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, dir_fd=dir_fd)
        except FileNotFoundError:
            if not create:
                raise OutboxError(errno.ENOENT, f"outbox {shown}: does not exist") from None
            parent = os.path.dirname(shown.rstrip("/")) or "."
            try:
                os.mkdir(path, DIR_MODE, dir_fd=dir_fd)
                fd = os.open(path, flags, dir_fd=dir_fd)
            except FileExistsError:
                fd = os.open(path, flags, dir_fd=dir_fd)
            except FileNotFoundError:
                raise OutboxError(errno.ENOENT, f"outbox {shown}: its directory {parent} does "
                                  "not exist: create the spool (or set notify.outbox)") from None
            except OSError as e:
                raise OutboxError(e.errno, f"outbox {shown}: cannot create it in {parent}: "
                                  f"{_describe(e)}") from None
        except OSError as e:
            what = "a symlink or not a directory: refused" if e.errno in (
                errno.ELOOP, errno.ENOTDIR) else _describe(e)
            raise OutboxError(e.errno, f"outbox {shown}: {what}") from None
        st = os.fstat(fd)
        if st.st_uid not in (0, os.geteuid()):
            os.close(fd)
            raise OutboxError(errno.EPERM, f"outbox {shown}: owned by uid {st.st_uid}, not root "
                              "or this user: refused (chown root it)")
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.close(fd)
            raise OutboxError(errno.EPERM, f"outbox {shown}: mode {stat.S_IMODE(st.st_mode):04o} "
                              "lets others read users' reports: refused (chmod 700 it)")
        return fd

    def close(self) -> None:
        for fd in (self._fd, self._qfd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd = self._qfd = None

    def __enter__(self) -> Outbox:
        return self if self._fd is not None else self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _dir(self, quarantined: bool = False) -> int:
        fd = self._qfd if quarantined else self._fd
        if fd is None:
            raise OutboxError(errno.EBADF, f"outbox {self.path}: not opened")
        return fd

    def entry_path(self, entry_id: str, quarantined: bool = False) -> str:
        return os.path.join(self.qpath if quarantined else self.path, f"{entry_id}.eml")

    # ---- entries -----------------------------------------------------------------------------

    def put(self, entry_id: str, data: bytes, state: dict[str, Any],
            quarantined: bool = False) -> str:
        """Write one entry durably (message first, then its state); OutboxError if it could
        not be written whole (a partial entry is removed)."""
        fd = self._dir(quarantined)
        where = self.qpath if quarantined else self.path
        try:
            write_atomic(fd, f"{entry_id}.eml", data, FILE_MODE)
            self._write_state(fd, entry_id, state)
        except OSError as e:
            for suffix in (".json", ".eml"):
                with contextlib.suppress(OSError):
                    os.unlink(f"{entry_id}{suffix}", dir_fd=fd)
            raise OutboxError(e.errno, f"outbox {where}: cannot write a message: "
                              f"{_describe(e)}") from None
        return self.entry_path(entry_id, quarantined)

    @staticmethod
    def _write_state(fd: int, entry_id: str, state: dict[str, Any]) -> None:
        state = dict(state)
        state["history"] = list(state.get("history") or [])[-MAX_HISTORY:]
        data = (json.dumps(state, indent=1, sort_keys=True) + "\n").encode()
        write_atomic(fd, f"{entry_id}.json", data, FILE_MODE)

    def write_state(self, entry_id: str, state: dict[str, Any]) -> None:
        try:
            self._write_state(self._dir(), entry_id, state)
        except OSError as e:
            raise OutboxError(e.errno, f"outbox {self.path}: cannot update {entry_id}.json: "
                              f"{_describe(e)}") from None

    def ids(self, quarantined: bool = False) -> list[str]:
        """Entry ids, oldest first (ids start with the creation time in ns)."""
        names = os.listdir(self._dir(quarantined))
        return sorted(n[:-5] for n in names if n.endswith(".json") and _ID_RE.match(n[:-5]))

    def orphans(self, older_than_s: float) -> list[str]:
        """.eml files without a state, older than `older_than_s` (a crash between the two
        writes, not a submit in progress)."""
        fd = self._dir()
        names = set(os.listdir(fd))
        out = []
        for n in sorted(names):
            if n.endswith(".eml") and f"{n[:-4]}.json" not in names and _ID_RE.match(n[:-4]):
                with contextlib.suppress(OSError):
                    if time.time() - os.stat(n, dir_fd=fd).st_mtime > older_than_s:
                        out.append(n[:-4])
        return out

    def read_state(self, entry_id: str, quarantined: bool = False) -> dict[str, Any]:
        data = read_bytes_nofollow(f"{entry_id}.json", self._dir(quarantined))
        state = json.loads(data)
        if not isinstance(state, dict):
            raise ValueError(f"{entry_id}.json: not a JSON object")
        return state

    def read_message(self, entry_id: str, quarantined: bool = False) -> bytes:
        return read_bytes_nofollow(f"{entry_id}.eml", self._dir(quarantined),
                                   limit=MAX_MESSAGE_BYTES)

    def remove(self, entry_id: str, quarantined: bool = False) -> None:
        """Drop an entry: state first, so a crash leaves an orphan .eml, never a state
        pointing at nothing."""
        fd = self._dir(quarantined)
        for suffix in (".json", ".eml"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{entry_id}{suffix}", dir_fd=fd)
        fsync_dir(fd)

    def _move(self, entry_id: str, state: dict[str, Any], src: int, dst: int) -> None:
        """The message to dst with its new state written there, the old state dropped."""
        os.rename(f"{entry_id}.eml", f"{entry_id}.eml", src_dir_fd=src, dst_dir_fd=dst)
        self._write_state(dst, entry_id, state)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{entry_id}.json", dir_fd=src)
        fsync_dir(dst)
        fsync_dir(src)

    def quarantine(self, entry_id: str, state: dict[str, Any]) -> str:
        """Move an entry (with its final state) to quarantine/; returns the new .eml path."""
        self._move(entry_id, state, self._dir(), self._dir(True))
        return self.entry_path(entry_id, True)

    def requeue(self, entry_id: str, state: dict[str, Any]) -> None:
        """Move a quarantined entry back (the admin fixed the cause), attempts reset."""
        self._move(entry_id, state, self._dir(True), self._dir())

    @contextlib.contextmanager
    def locked(self, entry_id: str, quarantined: bool = False) -> Iterator[bool]:
        """Yield True with the entry's lock held, False if someone else is sending it (or it
        is gone)."""
        try:
            fd = os.open(f"{entry_id}.eml", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
                         dir_fd=self._dir(quarantined))
        except OSError:
            yield False
            return
        with _try_lock(fd) as mine:
            yield mine

    @contextlib.contextmanager
    def flush_lock(self) -> Iterator[bool]:
        fd = os.open(LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE,
                     dir_fd=self._dir())
        with _try_lock(fd) as mine:
            yield mine
