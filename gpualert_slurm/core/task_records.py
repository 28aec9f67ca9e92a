"""The tap's per-task records and the node-local ones (docs/CONTRACTS.md, spank/README.md):
tasks/<step>.<rank>.exit and .start read as root reads a user's file, the exit records
slurmstepd kept in the node-local dir when the spool did not take them, and the Prolog's note
to this node's Epilog of when the run began. The spool's layout and its careful file
operations are core/spool.py's.
"""

from __future__ import annotations

import os
from contextlib import suppress
from typing import Any

from gpualert_slurm.core.spool import (
    SpoolError,
    checked_jobid,
    open_dir,
    opened_dir,
    read_bytes_nofollow,
    read_json_nofollow,
    write_atomic,
)

EXIT_FIELDS = ("node", "step", "rank", "pid", "exit_code", "signal", "core_dumped", "end_time",
               "status")


START_FIELDS = ("node", "step", "rank", "pid", "start_time", "attempt")


def _read_record(name: str, dir_fd: int, owners: tuple[int, ...] | None,
                 fields: tuple[str, ...]) -> dict[str, Any]:
    obj = read_json_nofollow(name, dir_fd, owners)
    if not isinstance(obj, dict):
        raise SpoolError(f"{name}: expected a JSON object")
    return {k: obj.get(k) for k in fields} | {k: v for k, v in obj.items() if k not in fields}


def read_exit_record(name: str, dir_fd: int,
                     owners: tuple[int, ...] | None = None) -> dict[str, Any]:
    """One tasks/<step>.<rank>.exit record (see CONTRACTS.md); missing fields are None."""
    return _read_record(name, dir_fd, owners, EXIT_FIELDS)


def read_start_record(name: str, dir_fd: int,
                      owners: tuple[int, ...] | None = None) -> dict[str, Any]:
    """One tasks/<step>.<rank>.start record (CONTRACTS.md); missing fields are None."""
    return _read_record(name, dir_fd, owners, START_FIELDS)


def task_node(exit_rec: dict[str, Any] | None, start_rec: dict[str, Any] | None) -> str | None:
    """The node a task ran on: its exit record says it; a task whose node was lost has only
    its start record (spank/README.md, Start records)."""
    for rec in (exit_rec, start_rec):
        node = (rec or {}).get("node")
        if isinstance(node, str) and node:
            return node
    return None


def read_exit_records(job_path: str, owners: tuple[int, ...] | None = None
                      ) -> dict[str, dict[str, Any]]:
    """All exit records of a job dir, by file name; unreadable or refused ones are left out (a
    task that died before writing one is what the classifier must cope with anyway). Root
    callers pass owners=(job uid, 0)."""
    out: dict[str, dict[str, Any]] = {}
    with opened_dir(job_path) as jfd:
        try:
            tfd = open_dir("tasks", jfd, shown=os.path.join(job_path, "tasks"))
        except FileNotFoundError:
            return out
        try:
            for entry in sorted(os.listdir(tfd)):
                if entry.endswith(".exit") and not entry.startswith("."):
                    try:
                        out[entry] = read_exit_record(entry, tfd, owners)
                    except OSError:
                        continue
        finally:
            os.close(tfd)
    return out


# ---- exit records the spool did not take -----------------------------------------------------

LOCAL_RECORDS = "/run/gpualert"  # the plugin's local= (spank/README.md)


def open_local_dir(local_dir: str, create: bool) -> int:
    """The node-local dir, opened; refused unless it is root's alone."""
    if create:
        with suppress(FileExistsError):
            os.mkdir(local_dir, 0o700)
    dfd = open_dir(local_dir)
    st = os.fstat(dfd)
    if st.st_uid != 0 or st.st_mode & 0o022:
        os.close(dfd)
        raise SpoolError(f"{local_dir}: not root's alone: refused")
    return dfd


def restore_local_exit_records(tasks_fd: int, jobid: str | int, attempt: int, uid: int,
                               gid: int, local_dir: str = LOCAL_RECORDS) -> list[str]:
    """Move the exit records slurmstepd kept in the node-local dir into the attempt's tasks/
    dir where the spool lacks them (the task's copier writes the spool's copy; none did when
    there was no copier, or the spool hung), and let every one of this run's go. A record the
    spool already holds is not replaced. Returns the names moved in. Root only: the local dir
    must be root's and closed to others, its files plain and root's."""
    prefix = f"{checked_jobid(jobid)}.{int(attempt)}."
    moved: list[str] = []
    try:
        dfd = open_local_dir(local_dir, create=False)
    except FileNotFoundError:
        return moved
    try:
        for name in sorted(os.listdir(dfd)):
            if not (name.startswith(prefix) and name.endswith(".exit")):
                continue
            target = name[len(prefix):]  # <step>.<rank>.exit
            # Most records are in the spool already (the copier wrote them): only the others
            # are read. A record gone meanwhile was taken by another Epilog sharing this dir
            # (several slurmd on one host): nothing to do for it.
            try:
                try:
                    os.stat(target, dir_fd=tasks_fd, follow_symlinks=False)
                except FileNotFoundError:
                    data = read_bytes_nofollow(name, dfd, owners=(0,))
                    write_atomic(tasks_fd, target, data, 0o600, uid, gid)
                    moved.append(target)
                os.unlink(name, dir_fd=dfd)
            except FileNotFoundError:
                continue
    finally:
        os.close(dfd)
    return moved


# ---- when this node's part of a run began --------------------------------------------------

def note_run_start(jobid: str | int, attempt: int, when: float,
                   local_dir: str = LOCAL_RECORDS) -> None:
    """The Prolog's word to this node's Epilog (root to root, in the node-local dir the user
    cannot reach): when the run's allocation reached this node. The Epilog's kernel window
    then starts there without asking slurmctld, one RPC less per node and job."""
    dfd = open_local_dir(local_dir, create=True)
    try:
        write_atomic(dfd, f"{checked_jobid(jobid)}.{int(attempt)}.start",
                     f"{when:.3f}\n".encode(), 0o600, 0, 0)
    finally:
        os.close(dfd)


def take_run_start(jobid: str | int, attempt: int, local_dir: str = LOCAL_RECORDS
                   ) -> float | None:
    """What note_run_start left for this run (and the file let go), or None: no Prolog ran
    here, the node rebooted (tmpfs), or the record is not root's plain file."""
    try:
        name = f"{checked_jobid(jobid)}.{int(attempt)}.start"
        dfd = open_local_dir(local_dir, create=False)
    except (OSError, SpoolError):
        return None
    try:
        data = read_bytes_nofollow(name, dfd, owners=(0,))
        with suppress(OSError):
            os.unlink(name, dir_fd=dfd)
        t = float(data.decode("ascii", "replace").strip())
        return t if t > 0 else None
    except (OSError, SpoolError, ValueError):
        return None
    finally:
        os.close(dfd)
