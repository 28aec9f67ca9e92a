"""What both epilogs share of the job's spool: opening <spool>/<jobid>/ and its attempt dir as
root without following the user's links, handing task logs on as already-opened, checked fds,
and what Slurm's environment says of the job (its attempt, exit code and options)."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from gpualert_slurm.core.config import Config, bound_options
from gpualert_slurm.core.options import OptionError, Options, options_from_env
from gpualert_slurm.core.spool import (
    DIR_MODE,
    SpoolError,
    open_attempt,
    open_dir,
    read_json_nofollow,
)
from gpualert_slurm.core.task_records import read_exit_record, read_start_record, task_node
from gpualert_slurm.hooks.common import HookLog

VERDICT_VERSION = 1
_LOG_RE = re.compile(r"^([A-Za-z0-9_-]+)\.(\d+)\.log$")


# ---- the job, as Slurm's environment tells it -----------------------------------------------

def restart_count(env: dict[str, str]) -> int:
    """The attempt number: Prolog/Epilog see SLURM_JOB_RESTART_COUNT, jobs SLURM_RESTART_COUNT."""
    for key in ("SLURM_JOB_RESTART_COUNT", "SLURM_RESTART_COUNT"):
        v = env.get(key, "")
        if v.isdigit():
            return int(v)
    return 0


def node_file_name(node: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", node) or "unknown"


def job_options(env: dict[str, str], cfg: Config, log: HookLog) -> Options:
    """The job's options within the site's bounds (config.bound_options: budget, hang, mail)."""
    try:
        return bound_options(options_from_env(env.get("SPANK_GPUALERT"), cfg.default_monitoring),
                             cfg)
    except OptionError as e:  # validated at submit time: a site problem; monitor anyway
        log.error(f"job {env.get('SLURM_JOB_ID')}: SPANK_GPUALERT: {e}; using defaults")
        return Options()


def exit_code2(env: dict[str, str]) -> tuple[int | None, int | None]:
    """SLURM_JOB_EXIT_CODE2 ('exit:signal'), else the raw wait status SLURM_JOB_EXIT_CODE."""
    v = env.get("SLURM_JOB_EXIT_CODE2", "")
    m = re.fullmatch(r"(\d+):(\d+)", v)
    if m:
        return int(m.group(1)), int(m.group(2))
    raw = env.get("SLURM_JOB_EXIT_CODE", "")
    if raw.isdigit():
        st = int(raw)
        return ((st >> 8) & 0xFF, 0) if not st & 0x7F else (0, st & 0x7F)
    return None, None



# ---- the job's spool dir, opened as root ----------------------------------------------------

@dataclass
class JobSpool:
    """<spool>/<jobid>/ and its attempt dir, opened with fds and checked: owned by the job's
    user, 0700, no symlink anywhere on the way. Paths are for messages and reports only."""

    path: str
    uid: int
    fd: int
    attempt: int
    attempt_path: str
    attempt_fd: int
    job: dict[str, Any] = field(default_factory=dict)

    def close(self) -> None:
        for fd in {self.attempt_fd, self.fd}:
            with suppress(OSError):
                os.close(fd)

    def subdir(self, name: str, create: bool = False) -> int | None:
        """An fd on <attempt>/<name> (nodes, tasks), a real dir of the user; None if missing."""
        try:
            fd = open_dir(name, self.attempt_fd, shown=os.path.join(self.attempt_path, name))
        except FileNotFoundError:
            if not create:
                return None
            os.mkdir(name, DIR_MODE, dir_fd=self.attempt_fd)
            os.chown(name, self.uid, -1, dir_fd=self.attempt_fd, follow_symlinks=False)
            fd = open_dir(name, self.attempt_fd)
        if os.fstat(fd).st_uid not in (self.uid, 0):
            os.close(fd)
            raise SpoolError(f"{self.attempt_path}/{name}: not owned by uid {self.uid}: refused")
        return fd


def open_job_spool(spool: str, jobid: str, uid: int, attempt: int) -> JobSpool:
    """Open the job dir the Prolog made; FileNotFoundError when there is none (the job was never
    monitored, or never started). The attempt dir is the env's restart count, else the latest
    one there is (a Prolog that could not make attempt-N leaves its tasks in an older one).
    The dirs are checked as every root reader checks them (spool.open_attempt)."""
    d = open_attempt(spool, jobid, uid, attempt, latest_if_missing=True)
    try:
        job = read_json_nofollow("job.json", d.fd, owners=(0,))
    except (OSError, SpoolError):
        job = {}
    return JobSpool(path=d.path, uid=uid, fd=d.fd, attempt=d.attempt,
                    attempt_path=d.attempt_path, attempt_fd=d.attempt_fd,
                    job=job if isinstance(job, dict) else {})


@contextmanager
def job_spool(spool: str, jobid: str, uid: int, attempt: int) -> Iterator[JobSpool]:
    js = open_job_spool(spool, jobid, uid, attempt)
    try:
        yield js
    finally:
        js.close()


# ---- task logs ------------------------------------------------------------------------------

@dataclass
class TaskLog:
    """One tasks/<step>.<rank>.log, opened O_NOFOLLOW and checked; `proc_path` names the open
    fd, so the classifier reads exactly the checked file and never resolves a user's path."""

    name: str
    step: str
    rank: int
    fd: int
    size: int
    mtime: float
    path: str  # for the report
    exit: dict[str, Any] | None = None
    start: dict[str, Any] | None = None  # its .start record: the node when no exit record

    @property
    def proc_path(self) -> str:
        return f"/proc/self/fd/{self.fd}"

    @property
    def node(self) -> str | None:
        return task_node(self.exit, self.start)

    def info(self) -> dict[str, Any]:
        e = self.exit or {}
        return {"file": self.path, "name": self.name, "step": self.step, "rank": self.rank,
                "node": self.node, "size": self.size, "last_output": self.mtime,
                "exit_code": e.get("exit_code"), "signal": e.get("signal"),
                "core_dumped": bool(e.get("core_dumped")), "end_time": e.get("end_time")}


def open_task_logs(js: JobSpool) -> list[TaskLog]:
    """Every task log of the attempt the user could have written, with its exit (and start)
    record. A log that is a symlink, a FIFO, hard-linked, or someone else's is skipped."""
    tfd = js.subdir("tasks")
    if tfd is None:
        return []
    out: list[TaskLog] = []
    try:
        names = sorted(os.listdir(tfd))
        for name in names:
            m = _LOG_RE.match(name)
            if not m:
                continue
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                             dir_fd=tfd)
            except OSError:
                continue
            st = os.fstat(fd)
            if (not stat.S_ISREG(st.st_mode) or st.st_nlink != 1
                    or st.st_uid not in (js.uid, 0)):
                os.close(fd)
                continue
            exit_rec = None
            ename = name[:-4] + ".exit"
            if ename in names:
                with suppress(OSError, SpoolError):
                    exit_rec = read_exit_record(ename, tfd, owners=(js.uid, 0))
            start_rec = None
            if name[:-4] + ".start" in names:  # a lost node's rank has only this one
                with suppress(OSError, SpoolError):
                    start_rec = read_start_record(name[:-4] + ".start", tfd, owners=(js.uid, 0))
            out.append(TaskLog(name=name, step=m.group(1), rank=int(m.group(2)), fd=fd,
                               size=st.st_size, mtime=st.st_mtime,
                               path=os.path.join(js.attempt_path, "tasks", name),
                               exit=exit_rec, start=start_rec))
    finally:
        os.close(tfd)
    return out


def close_task_logs(tasks: list[TaskLog]) -> None:
    for t in tasks:
        with suppress(OSError):
            os.close(t.fd)


def last_output(tasks: list[TaskLog]) -> float | None:
    return max((t.mtime for t in tasks if t.size), default=None)

