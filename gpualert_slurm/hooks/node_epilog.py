"""`gpualert hook epilog`: the node Epilog, as root on every node of the job, after its tasks end.

Classifies this node's task logs, adds what only root on the node sees (kernel log lines in the
job's window, NVML before/after, each rank's time of last output = its log's mtime) and writes
<attempt dir>/nodes/<node>.verdict.json for the job epilog (hooks/job_epilog/). Bounded by
hook_timeout_s; returns 0 whatever happens; never drains the node.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from contextlib import suppress
from typing import Any

from gpualert_slurm.core.config import Config
from gpualert_slurm.core.spool import (
    SpoolError,
    job_dir,
    read_json_nofollow,
    write_json_atomic,
)
from gpualert_slurm.core.task_records import (
    LOCAL_RECORDS,
    restore_local_exit_records,
    take_run_start,
)
from gpualert_slurm.hooks import cost
from gpualert_slurm.hooks.classify_child import PendingVerdict
from gpualert_slurm.hooks.common import HookLog, Watchdog, load_config_logged
from gpualert_slurm.hooks.jobspool import (
    VERDICT_VERSION,
    JobSpool,
    TaskLog,
    close_task_logs,
    exit_code2,
    job_options,
    last_output,
    node_file_name,
    open_job_spool,
    open_task_logs,
    restart_count,
)
from gpualert_slurm.hooks.run_hook import detach, run_hook, shim_left_s

SPOOL_PROBE_S = 3.0      # a spool that does not answer a stat in this long counts as hung
RESTORE_WAIT_S = 900.0   # how long the background restorer waits for a hung spool
RESTORE_POLL_S = 5.0


def run() -> int:
    return run_hook("epilog", node_epilog)


def node_epilog(env: dict[str, str], log: HookLog, watchdog: Watchdog) -> None:
    jobid = env.get("SLURM_JOB_ID", "")
    cfg = load_config_logged(log)
    if cfg is None:
        return
    # the watchdog counts from its own start; the shim from the process's
    watchdog.rearm(min(cfg.hook_timeout_s, shim_left_s()))
    log.set_spool(cfg.spool)
    if not job_options(env, cfg, log).monitored:
        return
    uid_s = env.get("SLURM_JOB_UID", "")
    if jobid.isdigit() and uid_s.isdigit() and \
            not answers_within(job_dir(cfg.spool, jobid), SPOOL_PROBE_S):
        log.set_spool("")  # the hooks' log is in the spool too: not another wait there
        log.error(f"job {jobid}: the spool {cfg.spool} does not answer (a hung mount?): no node "
                  f"verdict; the exit records kept in {LOCAL_RECORDS} are moved in when it "
                  f"answers again (waiting up to {RESTORE_WAIT_S / 60:g} min in the background)")
        if detach():
            restore_when_back(env, cfg.spool, jobid, int(uid_s), log)
        return
    if not os.path.isdir(cfg.spool):
        log.error(f"job {jobid}: spool {cfg.spool} does not exist; no node verdict")
        log.set_spool("")
        return
    if not uid_s.isdigit():
        log.error(f"job {jobid}: SLURM_JOB_UID={uid_s!r}: cannot tell the job's user")
        return
    node = env.get("SLURMD_NODENAME") or socket.gethostname()
    t0 = time.time()
    try:
        js = open_job_spool(cfg.spool, jobid, int(uid_s), restart_count(env))
    except FileNotFoundError:
        log.info(f"job {jobid}: no spool dir (Prolog did not run or the job never started)")
        return
    except (OSError, SpoolError) as e:
        log.error(f"job {jobid}: {e}; no node verdict")
        return
    tasks: list[TaskLog] = []
    try:
        # Exit records no copier put in the spool (untapped, hung spool) wait on this node: first.
        restore_records(js, env, log)
        tasks = open_task_logs(js)
        # This node's tasks: those whose exit record names it; the batch log belongs to the
        # batch host, which is the first node (where a batch log has no exit record yet).
        nodes = js.job.get("nodes") or []
        mine = [t for t in tasks if t.node == node
                or (t.node is None and t.step == "batch" and nodes[:1] == [node])]
        nfd = js.subdir("nodes", create=True)
        assert nfd is not None
        try:
            verdict = write_node_record(nfd, js, env, cfg, log, node, mine, t0)
        finally:
            os.close(nfd)
        log.info(f"job {jobid}: node verdict {verdict.get('class')} for {len(mine)} task(s) "
                 f"on {node} in {time.time() - t0:.2f} s")
        log.info(cost.line(jobid, f"epilog on {node}"))
    except (OSError, SpoolError) as e:
        log.error(f"job {jobid}: {e}; no node verdict")
    finally:
        close_task_logs(tasks)
        js.close()


def write_node_record(nfd: int, js: JobSpool, env: dict[str, str], cfg: Config, log: HookLog,
                      node: str, mine: list[TaskLog], t0: float) -> dict[str, Any]:
    """nodes/<node>.verdict.json: root's evidence first (sealed), then this node's own
    classification of its tasks; returns that verdict."""
    from gpualert_slurm.core import provenance
    from gpualert_slurm.core.evidence import kernel_evidence, nvml_evidence

    jobid = env.get("SLURM_JOB_ID", "")
    before = None
    # The kernel window starts where this node's Prolog (root, in the node-local dir) saw the
    # run begin, else where Slurm says it started: job.json is the user's to delete or
    # replace (docs/SECURITY.md).
    start, window_source = run_start(jobid, js.attempt)
    with suppress(OSError, SpoolError):
        rec = read_json_nofollow(f"{node_file_name(node)}.prolog.json", nfd, owners=(0,))
        before = rec.get("nvml") if prolog_record_of_this_run(
            rec, node, js.attempt, start, t0, jobid) else None
    ids = {jobid} | ({env["SLURM_JOB_SLUID"]} if env.get("SLURM_JOB_SLUID") else set())
    kernel = kernel_evidence(start, t0, timeout=min(5.0, cfg.hook_timeout_s / 4), job_ids=ids)
    nvml = nvml_evidence(before)
    root_facts = provenance.node_facts(
        jobid, js.attempt, node, (start, t0), window_source, kernel, nvml,
        provenance.job_gpu_bus_ids(env, nvml.get("after")))
    seal = provenance.seal(root_facts, provenance.munge_socket(
        getattr(getattr(cfg, "provenance", None), "munge_socket", None), env),
        timeout=min(provenance.MUNGE_TIMEOUT_S, cfg.hook_timeout_s / 4))
    code, sig = exit_code2(env)
    facts = {"exit_code": code, "signal": sig, "nvml": nvml,
             "hang_threshold_s": _hang_s(env, cfg, log)}
    lo = last_output(mine)
    facts["silence_s"] = t0 - lo if lo else None
    bound = min(cfg.hook_timeout_s, shim_left_s())
    # niced: under load the job epilog's own classification (the report's) goes first
    pending = PendingVerdict(mine, facts, kernel["lines"], nice=10)
    name = f"{node_file_name(node)}.verdict.json"
    record = {
        "version": VERDICT_VERSION, "job_id": jobid, "node": node,
        "attempt": js.attempt, "time": time.time(), "elapsed_s": time.time() - t0,
        "tasks": [t.info() for t in mine], "kernel": kernel, "nvml": nvml,
        "verdict": None, "classifier_error": None, "stage": "evidence",
        # what root collected here, sealed for the controller (provenance.py); the
        # rest of this record comes from the job's files
        "root_facts": root_facts, "seal": seal,
    }
    # The evidence first: it is all the job epilog (which waits for it) needs; the
    # node's own classification follows, for the record.
    write_json_atomic(nfd, name, record, 0o644)
    verdict, err = pending.result(max(1.0, bound - (time.time() - t0) - 2.0))
    record.update(verdict=verdict, classifier_error=err, stage="classified",
                  elapsed_s=time.time() - t0)
    write_json_atomic(nfd, name, record, 0o644)
    return verdict



def run_start(jobid: str, attempt: int) -> tuple[float | None, str]:
    """(When this run began on this node, where that came from or why there is none)."""
    t = take_run_start(jobid, attempt)
    return (t, "prolog") if t is not None else slurm_start(jobid, attempt)


def slurm_start(jobid: str, attempt: int, timeout: float = 3.0) -> tuple[float | None, str]:
    """(Slurm's start time of this run, where the bound came from or why there is none)."""
    from gpualert_slurm.core import slurm

    try:
        st = slurm.show_job(jobid, timeout=timeout)
    except slurm.SlurmError as e:
        return None, f"Slurm did not say when the job started: {str(e)[:200]}"
    start = slurm.parse_time(st.raw.get("StartTime"))
    if start is None:
        return None, "Slurm gave no start time"
    if st.restarts != attempt:
        return None, f"Slurm's job is at restart {st.restarts}, not attempt {attempt}"
    return start, "slurm"


def prolog_record_of_this_run(rec: Any, node: str, attempt: int, start: float | None,
                              now: float, jobid: str = "") -> bool:
    """Whether a root-owned <node>.prolog.json is this run's: a user can rename one of an
    earlier run of theirs into place, never write one (its NVML snapshot is the 'before')."""
    if not isinstance(rec, dict) or rec.get("node") != node:
        return False
    if rec.get("restart_count", 0) != attempt:
        return False
    if str((rec.get("slurm_env") or {}).get("SLURM_JOB_ID")) != str(jobid):
        return False  # another job's, renamed in
    t = rec.get("time")
    return isinstance(t, int | float) and start is not None and start - 300 <= t <= now


def restore_records(js: JobSpool, env: dict[str, str], log: HookLog) -> None:
    """Move in the exit records slurmstepd kept on this node that the spool lacks (no copier
    wrote them: untapped, or the spool hung), and let this run's local copies go."""
    jobid = env.get("SLURM_JOB_ID", "")
    tfd = js.subdir("tasks")
    if tfd is None:
        return
    try:
        gid_s = env.get("SLURM_JOB_GID", "")
        gid = int(gid_s) if gid_s.isdigit() else os.fstat(tfd).st_gid
        moved = restore_local_exit_records(tfd, jobid, js.attempt, js.uid, gid)
        if moved:
            log.info(f"job {jobid}: exit records moved in from {LOCAL_RECORDS}: "
                     f"{', '.join(moved)}")
    except (OSError, SpoolError) as e:
        log.error(f"job {jobid}: exit records kept in {LOCAL_RECORDS}: {e}")
    finally:
        os.close(tfd)



def answers_within(path: str, timeout: float) -> bool:
    """Whether stat(path) returns (found or not) within timeout. On a hung NFS, Lustre or FUSE
    mount it blocks; the probing thread is a daemon, and the wait it is stuck in (a request not
    yet taken by the server) ends with the process."""
    done = threading.Event()

    def probe() -> None:
        with suppress(OSError):
            os.stat(path)
        done.set()

    threading.Thread(target=probe, daemon=True, name="spool-probe").start()
    return done.wait(timeout)


def restore_when_back(env: dict[str, str], spool: str, jobid: str, uid: int,
                      log: HookLog) -> None:
    """In a detached worker: wait (bounded) for the hung spool, then move the kept exit records
    in, so the record of a job whose spool stalled still says how much of its log is missing.
    Never returns."""
    try:
        # A hard bound too: a spool that answers the probe and then hangs again ends us here.
        signal.alarm(int(RESTORE_WAIT_S + 60))
        deadline = time.monotonic() + RESTORE_WAIT_S
        while time.monotonic() < deadline:
            if answers_within(job_dir(spool, jobid), RESTORE_POLL_S):
                try:
                    js = open_job_spool(spool, jobid, uid, restart_count(env))
                except (OSError, SpoolError) as e:
                    log.error(f"job {jobid}: the spool answers again but: {e}; exit records "
                              f"stay in {LOCAL_RECORDS}")
                    break
                try:
                    restore_records(js, env, log)
                finally:
                    js.close()
                break
            time.sleep(RESTORE_POLL_S)
        else:
            log.error(f"job {jobid}: the spool did not answer for {RESTORE_WAIT_S / 60:g} min; "
                      f"exit records stay in {LOCAL_RECORDS} (gpualert gc sweeps them)")
    except Exception as e:
        log.error(f"job {jobid}: restoring exit records: {e!r}")
    os._exit(0)


def _hang_s(env: dict[str, str], cfg: Config, log: HookLog) -> float | None:
    opts = job_options(env, cfg, log)
    h = opts.hang_s if opts.hang_s is not None else cfg.hang_s
    return float(h) if h else None

