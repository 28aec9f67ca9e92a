"""The spool layout of docs/CONTRACTS.md, and the careful file operations root code uses on it.

Root code works on directories the job's user owns, so it never resolves a path string inside
them: it walks with directory fds and O_NOFOLLOW, creates with O_EXCL, and replaces files by
rename (which replaces a planted symlink, never its target).
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:  # kept out of `gpualert run`'s start-up time
    from typing import Any

# Slurm 22.05's reserved step ids (slurm.h).
STEP_BATCH = 0xFFFFFFFB
STEP_EXTERN = 0xFFFFFFFC
STEP_INTERACTIVE = 0xFFFFFFFA
STEP_PENDING = 0xFFFFFFFD

DIR_MODE = 0o700
MAX_RECORD_BYTES = 1 << 20

_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class SpoolError(OSError):
    """A spool path that is unsafe or unusable; str() says which and why."""


# ---- names ---------------------------------------------------------------------------------

def checked_jobid(jobid: str | int) -> str:
    s = str(jobid)
    # Job ids are numbers; array/het forms like 12_3 or 12+1 never name spool dirs (Slurm gives
    # each element its own SLURM_JOB_ID). Anything else could be a path trick.
    if not s.isdigit() or len(s) > 20:
        raise SpoolError(f"bad job id {s!r}: expected digits")
    return s


def step_name(step_id: int | str) -> str | None:
    """'batch' for the batch step, None for the steps that are not tapped, else the number."""
    n = int(step_id)
    if n == STEP_BATCH:
        return "batch"
    if n in (STEP_EXTERN, STEP_INTERACTIVE, STEP_PENDING):
        return None
    return str(n)


def job_dir(spool: str, jobid: str | int) -> str:
    return os.path.join(spool, checked_jobid(jobid))


def job_json(spool: str, jobid: str | int) -> str:
    return os.path.join(job_dir(spool, jobid), "job.json")


def node_prolog_record(spool: str, jobid: str | int, node: str) -> str:
    return os.path.join(job_dir(spool, jobid), "nodes", f"{_safe_name(node)}.prolog.json")


def task_log(spool: str, jobid: str | int, step: str, rank: int) -> str:
    return os.path.join(job_dir(spool, jobid), "tasks", f"{_safe_name(step)}.{int(rank)}.log")


def exit_record(spool: str, jobid: str | int, step: str, rank: int) -> str:
    return os.path.join(job_dir(spool, jobid), "tasks", f"{_safe_name(step)}.{int(rank)}.exit")


def attempt_subdir(attempt: int) -> str:
    """The attempt's directory relative to the job dir: '' for attempt 0, else 'attempt-N'
    (docs/CONTRACTS.md, Attempts)."""
    n = int(attempt)
    if n < 0:
        raise SpoolError(f"bad attempt {attempt!r}: expected a restart count >= 0")
    return "" if n == 0 else f"attempt-{n}"


def attempt_dir(job_path: str, attempt: int) -> str:
    """Where one attempt's nodes/, tasks/, verdict.json and report live."""
    sub = attempt_subdir(attempt)
    return os.path.join(job_path, sub) if sub else job_path


def list_attempts(job_path: str) -> list[int]:
    """The attempts a job dir holds, oldest first. Attempt 0 counts when its tasks/ or nodes/
    is there; a later one when its attempt-N/ directory is (links are not followed)."""
    found = []
    try:
        names = os.listdir(job_path)
    except OSError:
        return []
    if "tasks" in names or "nodes" in names:
        found.append(0)
    for name in names:
        if name.startswith("attempt-") and name[8:].isdigit() and int(name[8:]) > 0:
            try:
                if stat.S_ISDIR(os.lstat(os.path.join(job_path, name)).st_mode):
                    found.append(int(name[8:]))
            except OSError:  # gone meanwhile
                continue
    return sorted(found)


def latest_attempt(job_path: str) -> int:
    """The highest attempt in a job dir (0 when it holds none yet)."""
    attempts = list_attempts(job_path)
    return attempts[-1] if attempts else 0


def hooks_log(spool: str) -> str:
    return os.path.join(spool, "gpualert-hooks.log")


def _safe_name(name: str) -> str:
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise SpoolError(f"bad name {name!r}")
    return name


# ---- durable writes ------------------------------------------------------------------------

def fsync_dir(dir_fd: int) -> None:
    try:
        os.fsync(dir_fd)
    except OSError as e:  # some filesystems refuse fsync on a directory; nothing better to do
        if e.errno not in (errno.EINVAL, errno.EBADF):
            raise


def write_atomic(dir_fd: int, name: str, data: bytes, mode: int = 0o644,
                 uid: int = -1, gid: int = -1) -> None:
    """Replace dir_fd/name with data: temp file (O_EXCL|O_NOFOLLOW), fsync, rename, fsync dir.
    A reader sees the old content or the new one, never a part; after return it is on disk."""
    _safe_name(name)
    tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            if uid != -1 or gid != -1:
                os.fchown(fd, uid, gid)
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    fsync_dir(dir_fd)


def write_json_atomic(dir_fd: int, name: str, obj: Any, mode: int = 0o644,
                      uid: int = -1, gid: int = -1) -> None:
    data = (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode()
    write_atomic(dir_fd, name, data, mode, uid, gid)


# ---- safe opening --------------------------------------------------------------------------

def open_dir(path: str, dir_fd: int | None = None, shown: str | None = None) -> int:
    """Open a directory without following a symlink at its last component."""
    try:
        return os.open(path, _O_DIR, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise SpoolError(
                f"{shown or path}: not a directory (a symlink or a file): refused") from None
        raise


@contextmanager
def opened_dir(path: str, dir_fd: int | None = None) -> Iterator[int]:
    fd = open_dir(path, dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def check_spool_root(fd: int, path: str) -> None:
    """The spool root must be root's and writable by no one else: else a user could plant or
    swap job directories."""
    st = os.fstat(fd)
    if st.st_uid != 0:
        raise SpoolError(f"spool {path} is owned by uid {st.st_uid}, not root: refused")
    if st.st_mode & 0o022:
        raise SpoolError(
            f"spool {path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}):"
            " refused"
        )


def check_job_dir(fd: int, path: str, uid: int) -> None:
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        raise SpoolError(f"{path}: not a directory: refused")
    if st.st_uid != uid:
        raise SpoolError(f"{path} exists and is owned by uid {st.st_uid}, not {uid}: refused")
    if st.st_mode & 0o077:
        raise SpoolError(
            f"{path} exists with mode {stat.S_IMODE(st.st_mode):04o}, not 0700: refused"
        )


def open_log(path: str) -> BinaryIO:
    """A task log opened for reading (binary) with O_NONBLOCK: the classifier reopens the hook's
    checked fds by /proc/self/fd/N, and a plain open() of a file its user holds a lease on
    (F_SETLEASE) blocks root until the lease breaks (lease-break-time, 45 s by default);
    O_NONBLOCK makes that EWOULDBLOCK (an OSError, which every reader handles) at once.
    Regular files read the same with or without it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


@dataclass
class AttemptDirs:
    """A job dir and one attempt dir of it, opened and checked by `open_attempt`."""

    path: str
    fd: int
    attempt: int
    attempt_path: str
    attempt_fd: int

    def close(self) -> None:
        for fd in {self.attempt_fd, self.fd}:
            with suppress(OSError):
                os.close(fd)


def open_attempt(spool: str, jobid: str | int, uid: int | None, attempt: int | None,
                 latest_if_missing: bool = False) -> AttemptDirs:
    """The one check of a job's spool dirs that every root reader makes (the Prolog through
    create_job_dir, both epilogs, watch, show; the plugin's C twin is spank/records.c
    ensure_user_dir): from a spool root that is root's alone, by fds, no link followed, the job
    dir and the attempt dir must each be a real directory of the job's user, mode 0700. A dir
    one of them refuses, all refuse: a run whose Prolog refused it must not be read by an
    Epilog (issue 28). uid None: the job dir's owner (a reader that is not root: the
    filesystem already checked it). attempt None: the latest there is; latest_if_missing: the
    latest there is when attempt-N is missing (a Prolog that could not make it leaves the
    tasks in an older one). FileNotFoundError when the job dir is missing."""
    root_fd = open_dir(spool)
    try:
        check_spool_root(root_fd, spool)
        path = job_dir(spool, jobid)
        fd = open_dir(os.path.basename(path), root_fd, shown=path)
    finally:
        os.close(root_fd)
    afd = fd
    try:
        owner = os.fstat(fd).st_uid if uid is None else uid
        check_job_dir(fd, path, owner)
        n = latest_attempt(path) if attempt is None else attempt
        sub = attempt_subdir(n)
        if sub:
            try:
                afd = open_dir(sub, fd, shown=os.path.join(path, sub))
            except FileNotFoundError:
                if not latest_if_missing:
                    raise
                n = latest_attempt(path)
                sub = attempt_subdir(n)
                afd = open_dir(sub, fd, shown=os.path.join(path, sub)) if sub else fd
        apath = os.path.join(path, sub) if sub else path
        if afd != fd:
            check_job_dir(afd, apath, owner)
        return AttemptDirs(path=path, fd=fd, attempt=n, attempt_path=apath, attempt_fd=afd)
    except BaseException:
        if afd != fd:
            os.close(afd)
        os.close(fd)
        raise


def _rename_noreplace(src: str, dst: str, dir_fd: int) -> None:
    """renameat2(RENAME_NOREPLACE); where the filesystem lacks it (NFS), a plain rename, which
    still never replaces a non-empty directory (the other node's) nor follows a symlink."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is not None:
        rc = fn(dir_fd, os.fsencode(src), dir_fd, os.fsencode(dst), 1)
        if rc == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(err, os.strerror(err), dst)
    if _exists(dst, dir_fd):
        raise FileExistsError(errno.EEXIST, "exists", dst)
    os.rename(src, dst, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


def _rmtree_fd(dir_fd: int, name: str) -> None:
    """Remove our own temp dir (two levels at most), never following symlinks."""
    try:
        fd = open_dir(name, dir_fd)
    except OSError:
        return
    try:
        for entry in os.listdir(fd):
            st = os.stat(entry, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                _rmtree_fd(fd, entry)
            else:
                os.unlink(entry, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


class JobDir:
    """An open, verified job directory. `fd` is the job root; `attempt_fd` and `nodes_fd` are
    the attempt's directory and its nodes/ (for attempt 0, `attempt_fd` is `fd`); all stay
    valid until close(). `created` is True when this call made the job root (first node)."""

    def __init__(self, path: str, fd: int, nodes_fd: int, created: bool, attempt: int = 0,
                 attempt_fd: int | None = None, attempt_created: bool | None = None) -> None:
        self.path, self.fd, self.nodes_fd, self.created = path, fd, nodes_fd, created
        self.attempt = attempt
        # Whether this call made the attempt's directory (attempt 0: the job root).
        self.attempt_created = created if attempt_created is None else attempt_created
        self.attempt_fd = fd if attempt_fd is None else attempt_fd
        self.attempt_path = attempt_dir(path, attempt)

    def close(self) -> None:
        fds = [self.nodes_fd, self.fd]
        if self.attempt_fd != self.fd:
            fds.insert(1, self.attempt_fd)
        for fd in fds:
            with suppress(OSError):
                os.close(fd)


def _fill_attempt(fd: int, uid: int, gid: int) -> None:
    """nodes/ and tasks/ of the user, 0700, in a directory we just made (fd)."""
    for sub in ("nodes", "tasks"):
        os.mkdir(sub, DIR_MODE, dir_fd=fd)
        # Through an fd (O_NOFOLLOW): in a user's job dir the name may be swapped meanwhile.
        with opened_dir(sub, fd) as sfd:
            os.fchown(sfd, uid, gid)
            os.fchmod(sfd, DIR_MODE)  # mkdir's mode is cut by umask


def _make_noreplace(parent_fd: int, name: str, uid: int, gid: int, tag: str,
                    fill: Callable[[int], None]) -> bool:
    """Make parent/name (uid:gid, 0700, filled by `fill(fd)`) so that it appears complete or
    not at all: built under a temp name, then renamed into place without replacing anything.
    True when this call made it, False when something was there already (another node won
    the race, or something was planted: the caller checks what is there)."""
    tmp = f".tmp-{name}-{_safe_tag(tag)}-{os.getpid()}-{os.urandom(4).hex()}"
    os.mkdir(tmp, DIR_MODE, dir_fd=parent_fd)
    created = False
    try:
        with opened_dir(tmp, parent_fd) as tfd:
            fill(tfd)
            os.fchown(tfd, uid, gid)
            os.fchmod(tfd, DIR_MODE)
            os.fsync(tfd)
        try:
            _rename_noreplace(tmp, name, parent_fd)
            created = True
            fsync_dir(parent_fd)
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
                raise
    finally:
        if not created:
            _rmtree_fd(parent_fd, tmp)
    return created


def create_job_dir(spool: str, jobid: str | int, uid: int, gid: int,
                   job_record: dict[str, Any], tag: str = "", attempt: int = 0) -> JobDir:
    """Create <spool>/<jobid> owned by uid:gid 0700 with job.json and the attempt's nodes/ and
    tasks/ (attempt 0: in the job root; attempt N: in attempt-N/, see docs/CONTRACTS.md), or
    open what another node's Prolog made. Each directory appears complete or not at all (see
    _make_noreplace), so nodes racing for the same job or attempt never see a part. A
    directory there already must be a real directory of uid with mode 0700, else SpoolError."""
    name = checked_jobid(jobid)
    sub = attempt_subdir(attempt)
    path = os.path.join(spool, name)
    root_fd = open_dir(spool)
    try:
        check_spool_root(root_fd, spool)
        created = False
        if not _exists(name, root_fd):
            def fill_root(tfd: int) -> None:
                if sub:
                    os.mkdir(sub, DIR_MODE, dir_fd=tfd)
                    with opened_dir(sub, tfd) as afd:
                        _fill_attempt(afd, uid, gid)
                        os.fchown(afd, uid, gid)
                        os.fchmod(afd, DIR_MODE)
                else:
                    _fill_attempt(tfd, uid, gid)
                # job.json stays root's: a later root reader can tell it was not replaced.
                write_json_atomic(tfd, "job.json", job_record, 0o644)

            created = _make_noreplace(root_fd, name, uid, gid, tag, fill_root)
        fd = open_dir(name, root_fd, shown=path)
        afd = fd
        attempt_created = created
        try:
            check_job_dir(fd, path, uid)
            if sub:
                if not _exists(sub, fd):
                    attempt_created = _make_noreplace(fd, sub, uid, gid, tag,
                                                      lambda t: _fill_attempt(t, uid, gid))
                apath = os.path.join(path, sub)
                afd = open_dir(sub, fd, shown=apath)
                check_job_dir(afd, apath, uid)
            else:
                apath = path
            os.close(_ensure_subdir(afd, apath, "tasks", uid, gid))
            nodes_fd = _ensure_subdir(afd, apath, "nodes", uid, gid)
        except BaseException:
            if afd != fd:
                os.close(afd)
            os.close(fd)
            raise
        return JobDir(path=path, fd=fd, nodes_fd=nodes_fd, created=created, attempt=attempt,
                      attempt_fd=afd, attempt_created=attempt_created)
    finally:
        os.close(root_fd)


def _ensure_subdir(fd: int, path: str, sub: str, uid: int, gid: int) -> int:
    """Open (making it if missing: a job dir made by an older or other tool) a subdirectory
    of the user's job dir; it must be a real directory of that user. A missing one is built
    aside and renamed in already the user's: the job's copier may be opening it as the user
    that moment, and a mkdir-then-chown made it root's for a moment (EACCES: a task's log
    lost, seen when a late Prolog joined a running job's dir)."""
    if not _exists(sub, fd):
        _make_noreplace(fd, sub, uid, gid, "sub", lambda _tfd: None)
    sfd = open_dir(sub, fd, shown=os.path.join(path, sub))
    try:
        if os.fstat(sfd).st_uid != uid:
            raise SpoolError(f"{os.path.join(path, sub)} is not owned by uid {uid}: refused")
    except BaseException:
        os.close(sfd)
        raise
    return sfd


def _safe_tag(tag: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in tag)[:40] or "x"


# ---- reading -------------------------------------------------------------------------------

def open_nofollow_checked(name: str, dir_fd: int, owners: tuple[int, ...] | None = None
                          ) -> tuple[int, os.stat_result]:
    """(fd, fstat) of the regular file dir_fd/name, opened O_NOFOLLOW|O_NONBLOCK for root
    code; the checks are on the open fd, so nothing can be swapped between check and use.
    Refused (SpoolError, fd closed): symlinks, FIFOs, devices, directories, files with more
    than one link (a hard link a user made to a file they cannot read), and, when `owners` is
    given, files owned by anyone else."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SpoolError(f"{name}: not a regular file: refused")
        if st.st_nlink != 1:
            raise SpoolError(f"{name}: has {st.st_nlink} hard links: refused")
        if owners is not None and st.st_uid not in owners:
            raise SpoolError(f"{name}: owned by uid {st.st_uid}: refused")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_bytes_nofollow(name: str, dir_fd: int, limit: int = MAX_RECORD_BYTES,
                        owners: tuple[int, ...] | None = None) -> bytes:
    """Read a regular file at dir_fd/name for root code (open_nofollow_checked), refused too
    when over `limit`."""
    fd, st = open_nofollow_checked(name, dir_fd, owners)
    try:
        if st.st_size > limit:
            raise SpoolError(f"{name}: {st.st_size} bytes, more than {limit}: refused")
        chunks, total = [], 0
        while total <= limit:
            b = os.read(fd, 65536)
            if not b:
                break
            chunks.append(b)
            total += len(b)
        if total > limit:
            raise SpoolError(f"{name}: more than {limit} bytes: refused")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_json_nofollow(name: str, dir_fd: int, owners: tuple[int, ...] | None = None) -> Any:
    try:
        return json.loads(read_bytes_nofollow(name, dir_fd, owners=owners))
    except (ValueError, UnicodeDecodeError) as e:
        raise SpoolError(f"{name}: not valid JSON: {e}") from None


def read_job_file(spool: str, jobid: str | int, name: str, attempt: int = 0,
                  owners: tuple[int, ...] = (0,), job_uid: int | None = None,
                  limit: int = MAX_RECORD_BYTES) -> Any:
    """A JSON file root wrote in a job's directory (job.json), read as read_job_bytes reads
    it. OSError/SpoolError when any of it does not hold. (verdict.json: core.verdict.)"""
    data = read_job_bytes(spool, jobid, name, attempt, owners, job_uid, limit)
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise SpoolError(f"{name}: not valid JSON: {e}") from None


def read_job_bytes(spool: str, jobid: str | int, name: str, attempt: int = 0,
                   owners: tuple[int, ...] = (0,), job_uid: int | None = None,
                   limit: int = MAX_RECORD_BYTES) -> bytes:
    """A file root wrote in a job's directory (job.json, an attempt's verdict.json), read
    as root reads a user's directory: from the spool root (root's, checked) down by fds, no
    link followed on the way, O_NONBLOCK, size-capped, the file of one of `owners` (root: the
    user cannot have written it) with one link. job_uid: the job dir must be that user's.
    OSError/SpoolError when any of it does not hold."""
    root_fd = open_dir(spool)
    fds = [root_fd]
    try:
        check_spool_root(root_fd, spool)
        fds.append(open_dir(checked_jobid(jobid), root_fd, shown=job_dir(spool, jobid)))
        if job_uid is not None and os.fstat(fds[-1]).st_uid != job_uid:
            raise SpoolError(f"{job_dir(spool, jobid)}: not owned by uid {job_uid}: refused")
        sub = attempt_subdir(attempt)
        if sub:
            fds.append(open_dir(sub, fds[-1]))
        return read_bytes_nofollow(name, fds[-1], limit, owners=owners)
    finally:
        for fd in fds:
            os.close(fd)
