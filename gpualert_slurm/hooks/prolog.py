"""`gpualert hook prolog`: on each node, as root, before any task of the job starts.

Writes job.json and nodes/<node>.prolog.json into <spool>/<jobid>/ (the user's, 0700), making
the dir when the plugin's slurmstepd has not (spank/records.c, make_job_dir: the pre-launch log
guarantee is the plugin's, so that a job need not wait for its Prolog). When the queue worker is
free this runs before the first task; in a burst it may run after the job started. A requeued
job's run N (SLURM_JOB_RESTART_COUNT=N) gets its own attempt-N/ with nodes/ and tasks/
(docs/CONTRACTS.md, Attempts); job.json stays at the job root and lists every attempt. Bounded by
hook_timeout_s; returns 0 whatever happens and logs its own faults (hooks/run_hook.py).
Everything it reads comes from the environment slurmd gives a Prolog (SLURM_JOB_ID, _UID, _GID,
_USER, _NODELIST, _RESTART_COUNT, SLURMD_NODENAME, ..., and the plugin's SPANK_GPUALERT:
docs/CONTRACTS.md; what differs between Slurm versions: docs/SLURM-VERSIONS.md), so a test can
run it as a plain subprocess with a made-up environment.
"""

from __future__ import annotations

import os
import pwd
import socket
import time
from typing import Any

from gpualert_slurm.core.config import bound_options
from gpualert_slurm.core.options import OptionError, Options, options_from_env
from gpualert_slurm.core.slurm import SlurmError, expand_hostlist  # one hostlist grammar
from gpualert_slurm.core.spool import (
    SpoolError,
    create_job_dir,
    read_json_nofollow,
    write_json_atomic,
)
from gpualert_slurm.core.task_records import note_run_start
from gpualert_slurm.hooks.common import HookLog, Watchdog, load_config_logged, shim_bound_s
from gpualert_slurm.hooks.jobspool import node_file_name
from gpualert_slurm.hooks.run_hook import run_hook

RECORD_VERSION = 1


def _user_name(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def _restart_count(env: dict[str, str]) -> int:
    # The Prolog's name for it (seen on 22.05: SLURM_JOB_RESTART_COUNT=1 after a requeue);
    # the batch script and its tasks see SLURM_RESTART_COUNT instead.
    v = env.get("SLURM_JOB_RESTART_COUNT", "")
    return int(v) if v.isdigit() else 0


def _int_env(env: dict[str, str], key: str) -> int:
    v = env.get(key, "")
    if not v.isdigit():
        raise ValueError(f"{key}={v!r}: expected a number")
    return int(v)


def _job_record(env: dict[str, str], options: Options, options_error: str | None,
                uid: int, gid: int, node: str, queued_at: float | None) -> dict[str, Any]:
    # 22.05's slurmd Prolog sets SLURM_NODELIST; the ctld scripts set SLURM_JOB_NODELIST.
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    try:
        nodes = expand_hostlist(nodelist) if nodelist else [node]
    except SlurmError:
        nodes = []
    # A Prolog the queue worker ran late (a burst) dates the job from when Slurm ran its shim.
    now = time.time() if queued_at is None else queued_at
    rec: dict[str, Any] = {
        "version": RECORD_VERSION,
        "job_id": env["SLURM_JOB_ID"],
        "user": env.get("SLURM_JOB_USER") or _user_name(uid),
        "uid": uid,
        "gid": gid,
        "partition": env.get("SLURM_JOB_PARTITION"),
        "account": env.get("SLURM_JOB_ACCOUNT"),
        "cluster": env.get("SLURM_CLUSTER_NAME"),
        "work_dir": env.get("SLURM_JOB_WORK_DIR"),
        "stdout": env.get("SLURM_JOB_STDOUT"),
        "stderr": env.get("SLURM_JOB_STDERR"),
        "nodelist": nodelist,
        "nodes": nodes,
        "gpus": {node: env.get("CUDA_VISIBLE_DEVICES")},
        "start_time": now,
        "start_time_iso": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now)),
        "options_raw": env.get("SPANK_GPUALERT"),
        "options": options.to_json(),
        "options_error": options_error,
        "restart_count": _restart_count(env),
        "created_by_node": node,
        "prolog_delay_s": None if queued_at is None else round(time.time() - queued_at, 3),
    }
    rec["attempts"] = [_attempt_entry(rec)]
    return rec


def _node_record(env: dict[str, str], node: str) -> dict[str, Any]:
    from gpualert_slurm.core.gpu import gpu_snapshot

    return {
        "version": RECORD_VERSION,
        "node": node,
        "time": time.time(),
        "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
        "restart_count": _restart_count(env),
        "nvml": gpu_snapshot(),
        # What Slurm told this node's Prolog: evidence for the report, and for debugging.
        "slurm_env": {k: v for k, v in sorted(env.items())
                      if k.startswith(("SLURM_", "SLURMD_", "SPANK_", "CUDA_"))},
    }


def prolog(env: dict[str, str], log: HookLog, watchdog: Watchdog,
           queued_at: float | None = None) -> None:
    """queued_at: when the shim queued it, for a Prolog the queue worker runs (hooks/queue.py)."""
    jobid = env.get("SLURM_JOB_ID", "")
    cfg = load_config_logged(log)
    if cfg is None:
        return
    watchdog.rearm(min(cfg.hook_timeout_s, shim_bound_s()))
    log.set_spool(cfg.spool)
    if not os.path.isdir(cfg.spool):
        log.error(f"job {jobid}: spool {cfg.spool} does not exist; job not monitored "
                  "(create it root:root 0755, see `gpualert doctor`)")
        log.set_spool("")  # nowhere to write the file log
        return
    options_error = None
    try:
        # within the site's bounds: job.json then says what applies (config.bound_options)
        options = bound_options(options_from_env(env.get("SPANK_GPUALERT"),
                                                 cfg.default_monitoring), cfg)
    except OptionError as e:
        # The plugin validates at submit time, so this is a site problem; monitor anyway.
        options_error = str(e)
        options = Options()
        log.error(f"job {jobid}: SPANK_GPUALERT: {e}; monitoring with defaults")
    if not options.monitored:
        return
    try:
        uid = _int_env(env, "SLURM_JOB_UID")
        if env.get("SLURM_JOB_GID", "").isdigit():
            gid = int(env["SLURM_JOB_GID"])
        else:
            gid = pwd.getpwuid(uid).pw_gid
    except (ValueError, KeyError) as e:
        log.error(f"job {jobid}: cannot tell the job's user: {e}; job not monitored")
        return
    node = env.get("SLURMD_NODENAME") or socket.gethostname()
    record = _job_record(env, options, options_error, uid, gid, node, queued_at)
    attempt = record["restart_count"]
    try:
        # First, whatever the user's dir holds: the Epilog's kernel window then starts at root's
        # own record, never at a time the user's dirs could move (a refused dir returns below).
        note_run_start(jobid, attempt, record["start_time"])
    except (SpoolError, OSError) as e:  # the Epilog asks slurmctld's structured record instead
        log.error(f"job {jobid}: the run's start for this node's Epilog: {e}")
    try:
        jd = create_job_dir(cfg.spool, jobid, uid, gid, record, tag=node, attempt=attempt)
    except (SpoolError, OSError) as e:
        log.error(f"job {jobid}: {e}; job not monitored")
        return
    try:
        if not jd.created:
            _refresh_job_json(jd.fd, record)
        write_json_atomic(jd.nodes_fd, f"{node_file_name(node)}.prolog.json",
                          _node_record(env, node), 0o644)
        log.info(f"job {jobid}: {'created' if jd.attempt_created else 'joined'} "
                 f"{jd.attempt_path} "
                 f"(user {record['user']}, node {node}, attempt {attempt})")
    except (SpoolError, OSError) as e:
        log.error(f"job {jobid}: writing in {jd.path}: {e}")
    finally:
        jd.close()


def _attempt_entry(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: rec.get(k) for k in ("start_time", "start_time_iso", "nodelist", "nodes",
                                    "created_by_node")} | {"attempt": rec.get("restart_count", 0)}


def _refresh_job_json(fd: int, record: dict[str, Any]) -> None:
    """A requeued job keeps its id: job.json is rewritten for the new run, keeping each earlier
    run's start and nodes under `attempts`. Same-run nodes that lost the race leave the
    winner's record alone; a job.json not root's (replaced by the user) is rewritten."""
    try:
        old = read_json_nofollow("job.json", fd, owners=(0,))
    except OSError:
        old = None
    if not isinstance(old, dict) or not isinstance(old.get("restart_count"), int):
        write_json_atomic(fd, "job.json", record, 0o644)
        return
    if old["restart_count"] >= record["restart_count"]:
        return
    history = old.get("attempts")
    if not isinstance(history, list):
        history = [_attempt_entry(old)]
    record["attempts"] = [h for h in history if isinstance(h, dict)
                          and h.get("attempt") != record["restart_count"]]
    record["attempts"].append(_attempt_entry(record))
    write_json_atomic(fd, "job.json", record, 0o644)


def run() -> int:
    return run_hook("prolog", prolog)
