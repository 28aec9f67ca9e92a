"""`gpualert gc`: spool retention. Removes finished jobs' directories, oldest first, by the
config's `retention:` limits (max_age, max_total, min_age).

A job dir is never removed while
  - Slurm still runs it (squeue lists it in a state that is not final: PENDING, RUNNING,
    COMPLETING, a requeued job waiting again, ...); when squeue cannot be asked, nothing is
    removed. A job Slurm no longer knows is removable once it is older than min_age;
  - its report is not sent: the outbox (notify.outbox, default <spool>/.outbox) holds an entry
    for the job (the job epilog queues every message there first and removes it once sent;
    quarantined messages, which are never retried, do not count);
  - it is younger than min_age (its newest file, directory or log write).
Age is the time since the newest mtime in the job dir (a log's mtime is its last output).

It also sweeps this machine's node-local exit records (`--local-dir`, the plugin's `local=`,
default /run/gpualert): records slurmstepd kept there when the spool hung, which the node
Epilog moves in, stay until reboot when that Epilog never ran. One older than
retention.local_max_age whose job Slurm no longer runs is removed. The spool is shared, the
local dir is not: `--local-only` sweeps just the local dir, for each compute node's timer.

Root walks user-owned job dirs by fd without following symlinks; a job dir is first renamed to
`.gc-<jobid>-<random>` in the root-owned spool root (so no Prolog joins a half-removed dir) and
then removed by fd without recursion (remove_tree: any depth, any size, bounded memory and
fds; what the time limit leaves is finished by the next pass). One gc at a time (flock on
<spool>/.gc.lock); a second one says so and exits 0. `--dry-run` only lists.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import os
import re
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from gpualert_slurm.core.config import (
    Config,
    ConfigError,
    RetentionConfig,
    config_path,
    load_config,
)
from gpualert_slurm.core.spool import (
    SpoolError,
    check_spool_root,
    open_dir,
)
from gpualert_slurm.core.task_records import LOCAL_RECORDS, open_local_dir

LOCK_NAME = ".gc.lock"
REMOVING_PREFIX = ".gc-"  # a job dir being removed: renamed, so nothing else touches it
TEMP_PREFIX = ".tmp-"  # a Prolog's build dir (spool.create_job_dir); left only by a crash
FUTURE_SLACK_S = 300  # clock skew between nodes; later mtimes are ignored
MAX_DEPTH = 64  # deeper trees (a user's own making) are measured down to here only
MEASURE_MAX_ENTRIES = 200_000  # entries measured per job dir: a huge one cannot eat the pass
RM_MAX_DEPTH = 32  # deeper dirs are moved up to the spool root and removed as entries of their own
RM_BATCH = 4096  # subdirectory names held per directory while removing
# a node-local record, <job>.<attempt>.<step>.<rank>.exit, or the temp file a slurmstepd killed
# mid-write left, .<that>.<pid>.tmp (spank/records.c write_local_record); or a Prolog's
# <job>.<attempt>.start no Epilog took (task_records.note_run_start; its temp
# .<that>.<pid>.<hex>.tmp)
_LOCAL_RECORD = re.compile(r"^(\.)?(\d+)\.\d+\.(?:[A-Za-z0-9_-]+\.\d+\.exit|start)"
                           r"(?(1)\.\d+(?:\.[0-9a-f]+)?\.tmp)$")


class GcError(RuntimeError):
    """gc cannot run safely; str() says why and what to do."""


@dataclass
class JobUsage:
    """One entry of the spool root: a job dir, or a leftover `.tmp-`/`.gc-` dir."""

    name: str
    bytes: int = 0  # disk usage (allocated blocks), as du counts it
    files: int = 0
    newest: float = 0.0  # newest mtime in the tree
    partial: str = ""  # why the measure is incomplete, if it is

    @property
    def is_job(self) -> bool:
        return self.name.isdigit()


@dataclass
class Decision:
    job: JobUsage
    remove: bool
    reason: str


@dataclass
class Summary:
    decisions: list[Decision] = field(default_factory=list)
    removed: list[JobUsage] = field(default_factory=list)
    failed: list[tuple[JobUsage, str]] = field(default_factory=list)
    stopped: str = ""  # non-empty when the time limit cut the run short
    local: Summary | None = None  # the node-local records' sweep, when one was asked for
    local_dir: str = ""
    local_error: str = ""  # why the local dir was not swept


# ---- measuring -------------------------------------------------------------------------------

def measure(parent_fd: int, name: str, deadline: float | None = None,
            max_entries: int = MEASURE_MAX_ENTRIES) -> JobUsage:
    """Disk usage, file count and newest mtime of parent/name, walked by fd (never following a
    symlink; a symlink counts as itself). Iterative, at most MAX_DEPTH fds open at once, at
    most max_entries entries looked at (a user's huge directory is measured in part, and
    the pass goes on to the next job)."""
    u = JobUsage(name)
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except OSError as e:
        u.partial = f"cannot stat: {e.strerror or e}"
        return u
    future = time.time() + FUTURE_SLACK_S
    u.bytes, u.newest = st.st_blocks * 512, min(st.st_mtime, future)
    if not stat.S_ISDIR(st.st_mode):
        u.files = 1
        return u
    stack: list[tuple[int, Iterator[os.DirEntry[str]]]] = []
    seen = 0
    try:
        fd = open_dir(name, parent_fd)
        stack.append((fd, os.scandir(fd)))  # scandir(fd) reads a dup; we close fd ourselves
    except OSError as e:
        u.partial = f"cannot open: {e.strerror or e}"
        return u
    try:
        while stack:
            if deadline is not None and time.monotonic() > deadline:
                u.partial = "time limit reached while measuring"
                break
            entry = next(stack[-1][1], None)
            if entry is None:
                _close(stack.pop())
                continue
            seen += 1
            if seen > max_entries:
                u.partial = f"more than {max_entries} entries: not measured beyond"
                break
            try:
                est = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            u.bytes += est.st_blocks * 512
            if est.st_mtime <= future:  # a user's mtime in the future must not keep it forever
                u.newest = max(u.newest, est.st_mtime)
            if not stat.S_ISDIR(est.st_mode):
                u.files += 1
            elif len(stack) >= MAX_DEPTH:
                u.partial = f"deeper than {MAX_DEPTH} levels: not measured below"
            else:
                try:
                    fd = open_dir(entry.name, stack[-1][0])
                except OSError:
                    continue
                stack.append((fd, os.scandir(fd)))
    finally:
        for item in stack:
            _close(item)
    return u


def _close(item: tuple[int, Iterator[os.DirEntry[str]]]) -> None:
    item[1].close()  # type: ignore[attr-defined]
    os.close(item[0])


def scan_spool(spool: str, deadline: float | None = None) -> list[JobUsage]:
    """Every job dir (and leftover temp/removal dir) in the spool root, measured; the spool
    root must be root's and not writable by others (spool.check_spool_root)."""
    fd = open_dir(spool)
    try:
        check_spool_root(fd, spool)
        out = []
        for name in sorted(os.listdir(fd)):
            if not (name.isdigit() or name.startswith((TEMP_PREFIX, REMOVING_PREFIX))):
                continue  # the hooks log, the outbox, the lock: not ours to measure
            if deadline is not None and time.monotonic() > deadline:
                break
            try:
                if not stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                    continue
            except OSError:
                continue
            out.append(measure(fd, name, deadline))
        return out
    finally:
        os.close(fd)


# ---- what Slurm and the outbox say ---------------------------------------------------------

def active_jobs() -> dict[int, str]:
    """job id -> state of every job slurmctld holds in a state that is not final."""
    from gpualert_slurm.core import slurm

    try:
        jobs = slurm.queue()
    except slurm.SlurmError as e:
        raise GcError(f"cannot tell which jobs are still running ({e}); nothing removed"
                      ) from None
    return {j.job_id: j.state for j in jobs if not j.final}


def unsent_reports(outbox_path: str) -> dict[str, int]:
    """job id -> number of outbox entries waiting to be sent (quarantine excluded)."""
    from gpualert_slurm.notify.outbox import Outbox, OutboxError

    try:
        with Outbox(outbox_path).open(create=False) as ob:
            ids = ob.ids()
    except OutboxError as e:
        if e.errno == errno.ENOENT:  # no outbox yet: nothing was ever queued
            return {}
        raise GcError(f"cannot read the outbox ({e}); nothing removed") from None
    except OSError as e:
        raise GcError(f"cannot read the outbox {outbox_path} ({e.strerror or e}); "
                      "nothing removed") from None
    out: dict[str, int] = {}
    for entry_id in ids:  # <time_ns>-<job id>-<channel>-<random>
        parts = entry_id.split("-", 2)
        if len(parts) == 3:
            out[parts[1]] = out.get(parts[1], 0) + 1
    return out


# ---- the plan (pure: unit-tested) ----------------------------------------------------------

def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def fmt_age(s: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s / size:.1f} {unit}"
    return f"{max(s, 0):.0f} s"


def plan(entries: Iterable[JobUsage], ret: RetentionConfig, now: float,
         active: dict[int, str], unsent: dict[str, int]) -> list[Decision]:
    """Which entries to remove and why, oldest first: first every removable job idle longer
    than max_age, then, while the spool is over max_total, the oldest removable ones left."""
    decisions: list[Decision] = []
    removable: list[JobUsage] = []
    entries = sorted(entries, key=lambda u: (u.newest, u.name))
    for u in entries:
        age = now - u.newest
        if u.name.startswith(REMOVING_PREFIX):
            decisions.append(Decision(u, True, "left by an interrupted gc"))
        elif not u.is_job:
            if age >= ret.min_age_s:
                decisions.append(Decision(u, True, f"a crashed Prolog's temp dir, idle "
                                                   f"{fmt_age(age)}"))
            else:
                decisions.append(Decision(u, False, "a Prolog's temp dir, in use"))
        elif int(u.name) in active:
            decisions.append(Decision(u, False, f"job still in Slurm ({active[int(u.name)]})"))
        elif unsent.get(u.name):
            decisions.append(Decision(u, False, f"report not sent yet ({unsent[u.name]} "
                                                "outbox entries)"))
        elif age < ret.min_age_s:
            decisions.append(Decision(u, False, f"younger than min_age ({fmt_age(age)})"))
        elif u.partial.startswith("time limit"):  # its age is not known: the next run
            decisions.append(Decision(u, False, f"not measured ({u.partial})"))
        else:
            removable.append(u)
    total = sum(u.bytes for u in entries if not u.name.startswith(REMOVING_PREFIX))
    left = []
    for u in removable:
        age = now - u.newest
        if ret.max_age_s is not None and age > ret.max_age_s:
            decisions.append(Decision(u, True, f"idle {fmt_age(age)} > max_age "
                                               f"{fmt_age(ret.max_age_s)}"))
            total -= u.bytes
        else:
            left.append(u)
    for u in left:
        if ret.max_total_bytes is not None and total > ret.max_total_bytes:
            decisions.append(Decision(u, True, f"spool {fmt_bytes(total)} > max_total "
                                               f"{fmt_bytes(ret.max_total_bytes)}; oldest"))
            total -= u.bytes
        else:
            decisions.append(Decision(u, False, "within the limits"))
    order = {u.name: i for i, u in enumerate(entries)}
    return sorted(decisions, key=lambda d: (not d.remove, order[d.job.name]))


# ---- node-local exit records ---------------------------------------------------------------

def scan_local(local_dir: str) -> list[JobUsage]:
    """The exit records in the node-local dir (spank/README.md, "Records the spool did not
    take"), plain files only; [] when there is no such dir. Like the node Epilog
    (task_records.restore_local_exit_records), it refuses a dir anyone but root can write."""
    try:
        fd = open_local_dir(local_dir, create=False)
    except FileNotFoundError:
        return []
    try:
        out = []
        for name in sorted(os.listdir(fd)):
            if not _LOCAL_RECORD.match(name):
                continue
            try:
                est = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue  # moved in by a node Epilog meanwhile
            if stat.S_ISREG(est.st_mode):
                out.append(JobUsage(name, bytes=est.st_blocks * 512, files=1,
                                    newest=est.st_mtime))
        return out
    finally:
        os.close(fd)


def plan_local(records: Iterable[JobUsage], max_age_s: int, now: float,
               active: dict[int, str]) -> list[Decision]:
    """Which node-local records to remove, oldest first: those older than max_age_s of jobs
    Slurm no longer runs (a running job's node Epilog is still to come)."""
    out = []
    for u in sorted(records, key=lambda u: (u.newest, u.name)):
        m = _LOCAL_RECORD.match(u.name)
        job, age = (int(m.group(2)) if m else -1), now - u.newest
        if job in active:
            out.append(Decision(u, False, f"job still in Slurm ({active[job]})"))
        elif age <= max_age_s:
            out.append(Decision(u, False, f"younger than local_max_age ({fmt_age(age)})"))
        else:
            out.append(Decision(u, True, f"idle {fmt_age(age)} > local_max_age "
                                         f"{fmt_age(max_age_s)}: no node Epilog moved it in"))
    return sorted(out, key=lambda d: not d.remove)


def sweep_local(local_dir: str, max_age_s: int, active: dict[int, str], now: float,
                dry_run: bool = False) -> Summary:
    """Remove (unlink: never follows a link) what plan_local says; OSError/SpoolError when the
    dir cannot be read or is not root's alone."""
    summary = Summary(plan_local(scan_local(local_dir), max_age_s, now, active))
    fd = -1
    try:
        for d in summary.decisions:
            if not d.remove:
                continue
            if dry_run:
                summary.removed.append(d.job)
                continue
            try:
                if fd < 0:
                    fd = open_local_dir(local_dir, create=False)
                os.unlink(d.job.name, dir_fd=fd)
                summary.removed.append(d.job)
            except FileNotFoundError:  # a node Epilog moved it in meanwhile: done anyway
                continue
            except OSError as e:
                summary.failed.append((d.job, e.strerror or str(e)))
    finally:
        if fd >= 0:
            os.close(fd)
    return summary


# ---- removing ------------------------------------------------------------------------------

def remove_entry(root_fd: int, name: str, deadline: float | None = None) -> bool:
    """Rename the entry aside in the spool root, then remove it by fd (remove_tree). True when
    it is gone; False when the deadline came first (the `.gc-` entry is finished next pass)."""
    if not name.startswith(REMOVING_PREFIX):
        aside = f"{REMOVING_PREFIX}{name}-{os.urandom(4).hex()}"
        os.rename(name, aside, src_dir_fd=root_fd, dst_dir_fd=root_fd)
        name = aside
    pending = [name]
    while pending:
        if not remove_tree(root_fd, pending.pop(), deadline, pending):
            return False
    return True


def remove_tree(root_fd: int, name: str, deadline: float | None = None,
                moved: list[str] | None = None) -> bool:
    """Remove root/name, a tree a user made, without recursion and without following a link:
    files unlinked as they are listed (a huge directory is never held in memory: at most
    RM_BATCH subdirectory names a directory), at most RM_MAX_DEPTH fds open; a directory
    deeper than that is renamed up into the spool root as a `.gc-` entry of its own (named
    in `moved`), so any depth is removed. False when the deadline came first. OSError when
    something cannot be removed."""
    try:
        st = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
    except FileNotFoundError:
        return True
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=root_fd)
        return True
    stack: list[tuple[int, str, list[str]]] = [(open_dir(name, root_fd), name, [])]
    try:
        while stack:
            if deadline is not None and time.monotonic() > deadline:
                return False
            fd, _, subdirs = stack[-1]
            if not subdirs:
                _unlink_files(root_fd, fd, subdirs, len(stack), moved, deadline)
                if deadline is not None and time.monotonic() > deadline:
                    return False
            if subdirs:
                sub = subdirs.pop()
                try:
                    stack.append((open_dir(sub, fd), sub, []))
                except FileNotFoundError:
                    continue
                except SpoolError:  # swapped for a link or a file meanwhile: unlink that
                    os.unlink(sub, dir_fd=fd)
                continue
            fd, nm, _ = stack.pop()
            os.close(fd)
            os.rmdir(nm, dir_fd=stack[-1][0] if stack else root_fd)
        return True
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def _unlink_files(root_fd: int, fd: int, subdirs: list[str], depth: int,
                  moved: list[str] | None, deadline: float | None) -> None:
    """One listing of fd: unlink what is not a directory, keep up to RM_BATCH subdirectory
    names in `subdirs`; past RM_MAX_DEPTH a subdirectory is moved up to the spool root."""
    with os.scandir(fd) as it:
        for i, entry in enumerate(it):
            if deadline is not None and i % 1024 == 0 and time.monotonic() > deadline:
                return
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if not is_dir:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.name, dir_fd=fd)
            elif depth >= RM_MAX_DEPTH and moved is not None:
                up = f"{REMOVING_PREFIX}deep-{os.urandom(6).hex()}"
                os.rename(entry.name, up, src_dir_fd=fd, dst_dir_fd=root_fd)
                moved.append(up)
            else:
                subdirs.append(entry.name)
                if len(subdirs) >= RM_BATCH:
                    return


def _open_lock(root_fd: int) -> tuple[int, bool]:
    """The lock file (its mtime is the time of the last completed pass) and whether it was
    there."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(LOCK_NAME, flags, dir_fd=root_fd), True
    except FileNotFoundError:
        fd = os.open(LOCK_NAME, flags | os.O_CREAT, 0o600, dir_fd=root_fd)
        os.utime(fd, (0, 0))  # no pass yet, until one completes
        return fd, False


def run_gc(cfg: Config, dry_run: bool = False, time_limit_s: float | None = None,
           min_interval_s: float = 0, say: Callable[[str], None] = print,
           local_dir: str | None = None) -> Summary | None:
    """One gc pass; None when another gc holds the lock or the last pass was less than
    min_interval_s ago (the job epilog passes one so that it stays cheap). GcError when it
    cannot tell what is safe to remove; then nothing was removed. With local_dir, this
    machine's node-local exit records are swept first (sweep_local)."""
    deadline = None if time_limit_s is None else time.monotonic() + time_limit_s
    root_fd = open_dir(cfg.spool)
    try:
        check_spool_root(root_fd, cfg.spool)
        lock_fd = -1
        if not dry_run:
            lock_fd, _ = _open_lock(root_fd)
        try:
            if lock_fd >= 0:
                try:
                    fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    say(f"gc: another gpualert gc holds {cfg.spool}/{LOCK_NAME}; nothing done")
                    return None
                if min_interval_s and time.time() - os.fstat(lock_fd).st_mtime < min_interval_s:
                    return None
            ret = cfg.retention
            active = active_jobs()
            unsent = unsent_reports(cfg.outbox)
            now = time.time()
            local = local_error = None
            if local_dir:
                try:
                    local = sweep_local(local_dir, ret.local_max_age_s, active, now, dry_run)
                except OSError as e:  # the spool's own retention goes on regardless
                    local_error = e.strerror if type(e) is OSError and e.strerror else str(e)
            summary = Summary(plan(scan_spool(cfg.spool, deadline), ret, now, active, unsent))
            summary.local, summary.local_dir = local, local_dir or ""
            summary.local_error = local_error or ""
            for d in summary.decisions:
                if not d.remove:
                    continue
                if deadline is not None and time.monotonic() > deadline:
                    summary.stopped = f"time limit ({time_limit_s:g} s) reached"
                    break
                if dry_run:
                    summary.removed.append(d.job)
                    continue
                try:
                    if not remove_entry(root_fd, d.job.name, deadline):
                        summary.stopped = (f"time limit ({time_limit_s:g} s) reached while "
                                           f"removing {d.job.name} (the rest next pass)")
                        break
                    summary.removed.append(d.job)
                except OSError as e:
                    summary.failed.append((d.job, getattr(e, "strerror", None) or str(e)))
            if lock_fd >= 0:
                os.utime(lock_fd)  # the time of the last pass, for min_interval_s
            return summary
        finally:
            if lock_fd >= 0:
                os.close(lock_fd)
    finally:
        os.close(root_fd)


def epilog_pass(cfg: Config, time_limit_s: float = 5.0,
                min_interval_s: float = 3600.0) -> str:
    """A cheap, bounded gc pass for the job epilog (EpilogSlurmctld): at most one an hour, at
    most `time_limit_s`, never raising. Returns one line for the hook's log ("" if skipped)."""
    lines: list[str] = []
    try:
        summary = run_gc(cfg, time_limit_s=time_limit_s, min_interval_s=min_interval_s,
                         say=lines.append)
    except Exception as e:  # a hook never fails because of retention
        return f"gc: {e}"
    if summary is None:
        return "; ".join(lines)
    report(summary, False, False, lines.append)
    return lines[-1]


def report(summary: Summary, dry_run: bool, verbose: bool, say: Callable[[str], None]) -> None:
    verb = "would remove" if dry_run else "removed"
    removed = {u.name for u in summary.removed}
    failed = {u.name: why for u, why in summary.failed}
    for d in summary.decisions:
        u = d.job
        if d.remove and u.name in removed:
            say(f"{verb} {u.name}  {fmt_bytes(u.bytes)}  {d.reason}")
        elif d.remove and u.name in failed:
            say(f"FAILED to remove {u.name}: {failed[u.name]}")
        elif verbose and not d.remove:
            say(f"keep {u.name}  {fmt_bytes(u.bytes)}  {d.reason}")
    kept = [d for d in summary.decisions if not (d.remove and d.job.name in removed)]
    jobs_kept = [d for d in kept if d.job.is_job]
    why: dict[str, int] = {}
    for d in jobs_kept:
        key = d.reason.split(" (")[0]
        why[key] = why.get(key, 0) + 1
    freed = sum(u.bytes for u in summary.removed)
    left = sum(d.job.bytes for d in kept)
    say(f"gc: {verb} {len(summary.removed)} ({fmt_bytes(freed)}); kept {len(jobs_kept)} job "
        f"dirs ({fmt_bytes(left)})" + (": " + ", ".join(f"{n} {k}" for k, n in why.items())
                                       if why else "")
        + (f"; {len(summary.failed)} failed" if summary.failed else "")
        + (f"; stopped early: {summary.stopped}" if summary.stopped else ""))


def report_local(summary: Summary, local_dir: str, dry_run: bool, verbose: bool,
                 say: Callable[[str], None]) -> None:
    verb = "would remove" if dry_run else "removed"
    removed = {u.name for u in summary.removed}
    failed = {u.name: why for u, why in summary.failed}
    for d in summary.decisions:
        name = d.job.name
        if d.remove and name in removed:
            say(f"{verb} local record {name}  {d.reason}")
        elif d.remove and name in failed:
            say(f"FAILED to remove local record {name}: {failed[name]}")
        elif verbose and not d.remove:
            say(f"keep local record {name}  {d.reason}")
    kept = len(summary.decisions) - len(removed)
    say(f"gc: local records in {local_dir}: {verb} {len(removed)}, kept {kept}"
        + (f"; {len(summary.failed)} failed" if summary.failed else ""))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="gpualert gc", description=__doc__.split("\n")[0])
    ap.add_argument("--config", help="config file (default: $GPUALERT_CONFIG or "
                    "/etc/gpualert/gpualert.yaml)")
    ap.add_argument("--dry-run", action="store_true", help="list what would be removed")
    ap.add_argument("--time-limit", type=float, metavar="S",
                    help="stop after S seconds (what is left waits for the next run)")
    ap.add_argument("--min-interval", type=float, default=0, metavar="S",
                    help="do nothing if the last gc ran less than S seconds ago (epilogs)")
    ap.add_argument("-v", "--verbose", action="store_true", help="also list what is kept, "
                    "and why")
    ap.add_argument("--local-dir", default=LOCAL_RECORDS, metavar="DIR",
                    help="this machine's node-local exit records (the plugin's local=; "
                    f"default {LOCAL_RECORDS}): those older than retention.local_max_age "
                    "of jobs Slurm no longer runs are removed")
    ap.add_argument("--local-only", action="store_true", help="sweep only --local-dir, not "
                    "the spool (run it on each compute node)")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(config_path(args.config))
    except ConfigError as e:
        print(f"{e}\ngpualert gc: nothing removed; fix the config (`gpualert doctor`)",
              file=sys.stderr)
        return 2
    if os.geteuid() != 0 and not args.dry_run:
        print("gpualert gc: must run as root (job dirs belong to their users); "
              "--dry-run works for others as far as they can read", file=sys.stderr)
        return 2
    if args.local_only:
        try:
            local = sweep_local(args.local_dir, cfg.retention.local_max_age_s, active_jobs(),
                                time.time(), args.dry_run)
        except GcError as e:
            print(f"gpualert gc: {e}", file=sys.stderr)
            return 1
        except OSError as e:
            print(f"gpualert gc: {args.local_dir}: {e.strerror if type(e) is OSError else e}"
                  "; nothing removed", file=sys.stderr)
            return 1
        report_local(local, args.local_dir, args.dry_run, args.verbose, print)
        return 1 if local.failed else 0
    try:
        summary = run_gc(cfg, args.dry_run, args.time_limit, args.min_interval,
                         local_dir=args.local_dir)
    except (GcError, SpoolError) as e:
        print(f"gpualert gc: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"gpualert gc: spool {cfg.spool}: {e.strerror or e}; nothing removed",
              file=sys.stderr)
        return 1
    if summary is None:
        return 0
    if summary.local is not None:  # first: the spool's summary stays the last line
        report_local(summary.local, args.local_dir, args.dry_run, args.verbose, print)
    elif summary.local_error:
        print(f"gpualert gc: local records in {args.local_dir} not swept: "
              f"{summary.local_error}", file=sys.stderr)
    report(summary, args.dry_run, args.verbose, print)
    local_failed = summary.local is not None and summary.local.failed
    return 1 if summary.failed or local_failed or summary.local_error else 0
