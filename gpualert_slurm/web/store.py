"""The spool as the web page's user sees it: their own job dirs, their attempts, verdicts and
logs, read fd-relative (core/spool.py's readers: no link followed, bounded, regular files with
one link only).

The app runs as the user who asks (`gpualert web`, Open OnDemand's per-user server), so the
kernel is the access check: another user's job dir (0700) does not open. On top of that a job
dir counts only when it is the caller's own (st_uid), and verdict.json only when root wrote it
and it names that job and attempt (the checks of core.verdict.read_run): a dir or file the
user made by hand shows on that user's page as "not written by gpualert", and nowhere else.
Everything that is not the caller's is NotFound: the same answer whether it is missing,
someone else's, a symlink or a bad name, so a guessed URL learns nothing.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

from gpualert_slurm.core.spool import (
    SpoolError,
    attempt_subdir,
    check_spool_root,
    open_dir,
    open_nofollow_checked,
)
from gpualert_slurm.core.verdict import VerdictRecord, read_at

LOG_NAME = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9_.+-]{0,120}\.log")
ATTEMPT_DIR = re.compile(r"attempt-([1-9][0-9]{0,5})")


class NotFound(LookupError):
    """Not one of the caller's: missing, another user's, a link, a bad name (all alike)."""


class Untrusted(SpoolError):
    """The spool itself is not one to read (not root's, writable by others, not there)."""


@dataclass
class Run:
    """One attempt as the page shows it: its verdict, or why there is none to show."""

    job_id: str
    attempt: int
    verdict: VerdictRecord | None = None
    why: str = ""  # no verdict: "not ready" (missing, half-written) or "untrusted"
    detail: str = ""
    logs: list[tuple[str, int]] = field(default_factory=list)  # (name, size)
    mtime: float = 0.0


def _jobid_ok(jobid: str) -> bool:
    return jobid.isdigit() and len(jobid) <= 20 and not jobid.startswith("0")


@contextmanager
def spool_fd(spool: str) -> Iterator[int]:
    """The spool root, opened and checked (root's, writable by no one else): else Untrusted,
    and nothing under it is read (a spool a user made is never trusted)."""
    try:
        fd = open_dir(spool)
    except OSError as e:  # missing, unreadable, a link: nothing to show, and the page says so
        raise Untrusted(f"{spool}: {e.strerror or e}") from None
    try:
        try:
            check_spool_root(fd, spool)
        except SpoolError as e:
            raise Untrusted(str(e)) from None
        yield fd
    finally:
        os.close(fd)


def _open_own_dir(name: str, dir_fd: int) -> int:
    """dir_fd/name, a directory of the caller's own, opened without following a link."""
    try:
        fd = open_dir(name, dir_fd)
    except (OSError, SpoolError):
        raise NotFound(name) from None
    if os.fstat(fd).st_uid != os.getuid():
        os.close(fd)
        raise NotFound(name)
    return fd


@contextmanager
def job_fd(root_fd: int, jobid: str) -> Iterator[int]:
    if not _jobid_ok(jobid):
        raise NotFound(jobid)
    fd = _open_own_dir(jobid, root_fd)
    try:
        yield fd
    finally:
        os.close(fd)


@contextmanager
def attempt_fd(jfd: int, attempt: int) -> Iterator[int]:
    """The attempt's dir inside the job dir (attempt 0 is the job dir itself)."""
    try:
        sub = attempt_subdir(attempt)
    except SpoolError:
        raise NotFound(str(attempt)) from None
    if not sub:
        yield jfd
        return
    fd = _open_own_dir(sub, jfd)
    try:
        yield fd
    finally:
        os.close(fd)


def attempts(jfd: int) -> list[int]:
    """The attempts the job dir holds, oldest first (spool.list_attempts' rule, by fd: a
    later attempt counts when its attempt-N dir is there, attempt 0 when tasks/ or nodes/ is,
    or when there is nothing else yet)."""
    found: list[int] = []
    names = os.listdir(jfd)
    if "tasks" in names or "nodes" in names or "verdict.json" in names:
        found.append(0)
    for name in names:
        m = ATTEMPT_DIR.fullmatch(name)
        if m:
            with suppress(OSError):
                if stat.S_ISDIR(os.stat(name, dir_fd=jfd, follow_symlinks=False).st_mode):
                    found.append(int(m.group(1)))
    return sorted(found) or [0]


def verdict_of(afd: int, jobid: str, attempt: int) -> tuple[VerdictRecord | None, str, str]:
    """(verdict, why, detail): the attempt's verdict.json read by core.verdict (root's file,
    bounded, no link), and only when it is about this job and attempt; else why not."""
    try:
        v = read_at(afd, owners=(0,))
    except FileNotFoundError:
        return None, "not ready", "the job epilog has not written its verdict yet"
    except SpoolError as e:
        text = str(e)
        if "owned by uid" in text or "hard links" in text or "not a regular file" in text:
            return None, "untrusted", "verdict.json here was not written by gpualert"
        # not JSON, cut short, wrong shape: a file being written, or a broken one
        return None, "not ready", "verdict.json is not complete"
    except OSError as e:
        return None, "not ready", f"verdict.json: {e.strerror or e}"
    if str(v.job_id) != jobid or v.attempt != attempt:
        return None, "untrusted", "verdict.json here is about another run"
    return v, "", ""


def list_logs(afd: int) -> list[tuple[str, int]]:
    """(name, size) of the attempt's task logs: regular files under tasks/ only."""
    try:
        tfd = _open_own_dir("tasks", afd)
    except NotFound:
        return []
    try:
        out = []
        for name in sorted(os.listdir(tfd)):
            if not LOG_NAME.fullmatch(name):
                continue
            with suppress(OSError):
                st = os.stat(name, dir_fd=tfd, follow_symlinks=False)
                if stat.S_ISREG(st.st_mode):
                    out.append((name, st.st_size))
        return out
    finally:
        os.close(tfd)


def read_run(root_fd: int, jobid: str, attempt: int | None = None,
             with_logs: bool = False) -> tuple[Run, list[int]]:
    """The caller's job's attempt (default: the latest) and the job's attempts."""
    with job_fd(root_fd, jobid) as jfd:
        have = attempts(jfd)
        n = have[-1] if attempt is None else attempt
        if n not in have:
            raise NotFound(f"{jobid}/{n}")
        with attempt_fd(jfd, n) as afd:
            v, why, detail = verdict_of(afd, jobid, n)
            run = Run(jobid, n, v, why, detail, mtime=os.fstat(afd).st_mtime)
            if with_logs:
                run.logs = list_logs(afd)
    return run, have


def own_job_ids(root_fd: int) -> list[str]:
    """The job dirs in the spool that are the caller's, newest id first (a stat each: no
    other user's dir is opened)."""
    uid = os.getuid()
    out = []
    for name in os.listdir(root_fd):
        if not _jobid_ok(name):
            continue
        with suppress(OSError):
            st = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == uid:
                out.append(name)
    return sorted(out, key=int, reverse=True)


@contextmanager
def open_log(root_fd: int, jobid: str, attempt: int, name: str) -> Iterator[tuple[int, int]]:
    """(fd, size) of a task log of the caller's job: a regular file with one link under the
    attempt's tasks/, opened without following a link (spool.open_nofollow_checked)."""
    if not LOG_NAME.fullmatch(name):
        raise NotFound(name)
    with job_fd(root_fd, jobid) as jfd, attempt_fd(jfd, attempt) as afd:
        tfd = _open_own_dir("tasks", afd)
        try:
            fd, st = open_nofollow_checked(name, tfd)
        except (OSError, SpoolError):
            raise NotFound(name) from None
        finally:
            os.close(tfd)
    try:
        if st.st_uid != os.getuid():
            raise NotFound(name)
        yield fd, st.st_size
    finally:
        os.close(fd)


@contextmanager
def open_artifact(work_dir: str, name: str) -> Iterator[tuple[int, int]]:
    """(fd, size) of an artifact the report listed: a regular file under the job's work dir,
    opened as the user, refused when it is a link or resolves outside the work dir."""
    if not work_dir or not os.path.isabs(work_dir) or "\0" in name:
        raise NotFound(name)
    rel = name[len(work_dir) + 1:] if name.startswith(work_dir + "/") else name
    if os.path.isabs(rel) or ".." in rel.split("/"):
        raise NotFound(name)
    path = os.path.join(work_dir, rel)
    base = os.path.realpath(work_dir)
    if os.path.commonpath([os.path.realpath(path), base]) != base:
        raise NotFound(name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        raise NotFound(name) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            raise NotFound(name)
        yield fd, st.st_size
    finally:
        os.close(fd)
