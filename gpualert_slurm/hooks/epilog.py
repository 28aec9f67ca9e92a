"""`gpualert hook epilog`: the node Epilog, as root on every node of the job, after its tasks end.

Classifies this node's task logs, adds what only root on the node sees (kernel log lines in the
job's window, NVML before/after, each rank's time of last output = its log's mtime) and writes
<attempt dir>/nodes/<node>.verdict.json for the job epilog (hooks/epilog_slurmctld.py). Bounded
by hook_timeout_s; returns 0 whatever happens; never drains the node.

Also home of what both epilogs share: opening the job's spool dir as root without following the
user's links, and handing task logs to the classifier as already-opened, checked fds.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from gpualert_slurm.core.config import Config, bound_options
from gpualert_slurm.core.options import OptionError, Options, options_from_env
from gpualert_slurm.core.spool import (
    DIR_MODE,
    LOCAL_RECORDS,
    SpoolError,
    attempt_subdir,
    check_job_dir,
    check_spool_root,
    job_dir,
    latest_attempt,
    open_dir,
    read_exit_record,
    read_json_nofollow,
    read_start_record,
    restore_local_exit_records,
    task_node,
    write_json_atomic,
)
from gpualert_slurm.hooks import cost, gate
from gpualert_slurm.hooks.common import (
    DEFAULT_TIMEOUT_S,
    HookLog,
    Watchdog,
    load_config_logged,
    shim_bound_s,
)

VERDICT_VERSION = 1
_LOG_RE = re.compile(r"^([A-Za-z0-9_-]+)\.(\d+)\.log$")


def restart_count(env: dict[str, str]) -> int:
    """The attempt number: Prolog/Epilog see SLURM_JOB_RESTART_COUNT, jobs SLURM_RESTART_COUNT."""
    for key in ("SLURM_JOB_RESTART_COUNT", "SLURM_RESTART_COUNT"):
        v = env.get(key, "")
        if v.isdigit():
            return int(v)
    return 0


def process_age() -> float:
    """Seconds since this process started: the shim's `timeout` counts from there, and on a
    loaded controller the interpreter's start-up alone can take seconds."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
        return max(0.0, up - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


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
    one there is (a Prolog that could not make attempt-N leaves its tasks in an older one)."""
    root_fd = open_dir(spool)
    try:
        check_spool_root(root_fd, spool)
        path = job_dir(spool, jobid)
        fd = open_dir(os.path.basename(path), root_fd, shown=path)
    finally:
        os.close(root_fd)
    try:
        check_job_dir(fd, path, uid)
        try:
            job = read_json_nofollow("job.json", fd, owners=(0,))
        except (OSError, SpoolError):
            job = {}
        sub = attempt_subdir(attempt)
        afd = fd
        if sub:
            try:
                afd = open_dir(sub, fd, shown=os.path.join(path, sub))
            except FileNotFoundError:
                attempt = latest_attempt(path)
                sub = attempt_subdir(attempt)
                afd = open_dir(sub, fd) if sub else fd
        if afd != fd and os.fstat(afd).st_uid != uid:
            os.close(afd)
            raise SpoolError(f"{path}/{sub}: not owned by uid {uid}: refused")
        return JobSpool(path=path, uid=uid, fd=fd, attempt=attempt,
                        attempt_path=os.path.join(path, sub) if sub else path, attempt_fd=afd,
                        job=job if isinstance(job, dict) else {})
    except BaseException:
        os.close(fd)
        raise


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


class PendingVerdict:
    """A classification running in a forked child (started at once, so the caller can do
    other work meanwhile); result() gives (verdict JSON, error or None)."""

    def __init__(self, tasks: list[TaskLog], facts: dict[str, Any],
                 kernel_lines: list[str], nice: int = 0) -> None:
        self.kpath: str | None = None
        self.child: Any = None
        self.error: str | None = None
        self.names = {t.proc_path: t.path for t in tasks}
        try:
            from gpualert_slurm.classify import (
                JobFacts,
                RuleError,
                TaskInput,
                classify,
                load_rules,
            )
            from gpualert_slurm.core.artifacts import Forked

            if kernel_lines:
                kfd, self.kpath = tempfile.mkstemp(prefix="gpualert-kernel-", suffix=".log")
                with os.fdopen(kfd, "w") as f:
                    f.write("\n".join(kernel_lines) + "\n")
                self.names[self.kpath] = "(kernel log)"
            inputs = []
            for t in tasks:
                e = t.exit or {}
                inputs.append(TaskInput(
                    path=t.proc_path, rank=t.rank, node=t.node, step=t.step,
                    exit_code=e.get("exit_code"), signal=e.get("signal") or None,
                    core_dumped=bool(e.get("core_dumped")), end_time=e.get("end_time")))
            jf = JobFacts(**{k: facts.get(k) for k in (
                "exit_code", "signal", "slurm_state", "slurm_reason", "nvml",
                "hang_threshold_s", "silence_s")}, kernel_log=self.kpath)

            def judge() -> dict[str, Any]:
                if nice:
                    os.nice(nice)
                note = None
                try:
                    v = classify(inputs, jf)
                except RuleError as e:  # a broken site rule must not cost the user the report
                    v = classify(inputs, jf, load_rules(site=False))
                    note = f"site rules ignored: {e}"
                out = v.to_json()
                if note:
                    out["detail"] = "; ".join(x for x in (out.get("detail"), note) if x)
                # flags the classifier may add beyond the documented fields (silent failure)
                for extra in ("silent_failure", "silent"):
                    if hasattr(v, extra) and extra not in out:
                        out[extra] = getattr(v, extra)
                return out

            self.child = Forked(judge)
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"

    def cancel(self) -> None:
        if self.child is not None:
            self.child.cancel()
        self._cleanup()

    def _cleanup(self) -> None:
        if self.kpath:
            with suppress(OSError):
                os.unlink(self.kpath)
            self.kpath = None

    def result(self, timeout_s: float) -> tuple[dict[str, Any], str | None]:
        try:
            if self.error:
                raise RuntimeError(self.error)
            out = self.child.result(timeout_s)
            for item in [*out.get("evidence", []), *out.get("cascades", [])]:
                if isinstance(item, dict) and item.get("file") in self.names:
                    item["file"] = self.names[item["file"]]
            out["detail"] = _unproc(out.get("detail") or "", self.names)
            return out, None
        except Exception as e:  # the classifier raising or too slow: report anyway
            return ({"class": "unknown", "domain": "unknown", "confidence": 0.0,
                     "hint": "gpualert could not classify this job; the logs below are "
                             "complete.",
                     "detail": f"classifier error: {type(e).__name__}: {e}", "evidence": [],
                     "root_rank": None, "root_node": None, "root_step": None,
                     "cascades": []},
                    f"{type(e).__name__}: {e}")
        finally:
            self._cleanup()


def classify_tasks(tasks: list[TaskLog], facts: dict[str, Any], kernel_lines: list[str],
                   timeout_s: float = 60.0) -> tuple[dict[str, Any], str | None]:
    """The classifier's verdict as JSON, with file names mapped back from /proc/self/fd to the
    spool paths, or (an 'unknown' verdict, the error) when the classifier raised or ran past
    timeout_s (a huge log on a busy node): a broken or slow classifier must still leave a
    report. It runs in a forked child, which can be killed at the bound."""
    return PendingVerdict(tasks, facts, kernel_lines).result(timeout_s)


def _unproc(text: str, names: dict[str, str]) -> str:
    for k, v in names.items():
        text = text.replace(k, v)
    return text


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


def last_output(tasks: list[TaskLog]) -> float | None:
    return max((t.mtime for t in tasks if t.size), default=None)


# ---- the node Epilog ------------------------------------------------------------------------

def node_epilog(env: dict[str, str], log: HookLog, watchdog: Watchdog) -> None:
    jobid = env.get("SLURM_JOB_ID", "")
    cfg = load_config_logged(log)
    if cfg is None:
        return
    # the watchdog counts from its own start; the shim from the process's
    watchdog.rearm(min(cfg.hook_timeout_s, shim_bound_s() - process_age()))
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
        # Exit records slurmstepd could not put in a hung spool wait on this node: first.
        restore_records(js, env, log)
        tasks = open_task_logs(js)
        # This node's tasks: those whose exit record names it; the batch log belongs to the
        # batch host, which is the first node (where a batch log has no exit record yet).
        nodes = js.job.get("nodes") or []
        mine = [t for t in tasks if t.node == node
                or (t.node is None and t.step == "batch" and nodes[:1] == [node])]
        before = None
        nfd = js.subdir("nodes", create=True)
        assert nfd is not None
        try:
            from gpualert_slurm.core import provenance
            from gpualert_slurm.core.evidence import kernel_evidence, nvml_evidence

            # The kernel window starts where Slurm says this run started: job.json is the
            # user's to delete or replace (docs/SECURITY.md).
            start, window_source = slurm_start(jobid, js.attempt)
            with suppress(OSError, SpoolError):
                rec = read_json_nofollow(f"{node_file_name(node)}.prolog.json", nfd, owners=(0,))
                before = rec.get("nvml") if prolog_record_of_this_run(
                    rec, node, js.attempt, start, t0, jobid) else None
            kernel = kernel_evidence(start, t0, timeout=min(5.0, cfg.hook_timeout_s / 4))
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
            bound = min(cfg.hook_timeout_s, shim_bound_s() - process_age())
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
    """Move in the exit records slurmstepd kept on this node because the spool hung."""
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


SPOOL_PROBE_S = 3.0      # a spool that does not answer a stat in this long counts as hung
RESTORE_WAIT_S = 900.0   # how long the background restorer waits for a hung spool
RESTORE_POLL_S = 5.0


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


def run(which: str) -> int:
    log = HookLog(which)
    try:
        watchdog = Watchdog(log, min(DEFAULT_TIMEOUT_S, shim_bound_s()))
        env = dict(os.environ)
        if not env.get("SLURM_JOB_ID", "").isdigit():
            log.error(f"SLURM_JOB_ID={env.get('SLURM_JOB_ID')!r}: not run by Slurm? nothing done")
            return 0
        if which == "epilog":
            node_epilog(env, log, watchdog)
        else:
            from gpualert_slurm.hooks import epilog_slurmctld

            if env.get("GPUALERT_HOOK_FOREGROUND") == "1" or not _worth_a_worker(env, log):
                epilog_slurmctld.job_epilog(env, log, watchdog)
            elif detach():
                # The worker: at most gate.slots() at work at once (a burst of ending jobs
                # must not starve slurmctld), a new watchdog (threads do not survive fork),
                # then the report.
                gate.enter()  # its wait is in the job epilog's cost line
                try:
                    epilog_slurmctld.job_epilog(env, log, Watchdog(log, DEFAULT_TIMEOUT_S))
                except Exception as e:
                    log.error(f"job {env['SLURM_JOB_ID']}: unexpected error: {e!r}")
                os._exit(0)
        watchdog.stop()
    except Exception as e:  # an Epilog that fails drains the node: never
        log.error(f"job {os.environ.get('SLURM_JOB_ID', '?')}: unexpected error: {e!r}")
    return 0


def _worth_a_worker(env: dict[str, str], log: HookLog) -> bool:
    """A monitored job with a usable config: else the foreground run just logs and returns."""
    from gpualert_slurm.core.config import ConfigError, load_config

    try:
        return job_options(env, load_config(), log).monitored
    except ConfigError:
        return False


def detach() -> bool:
    """Fork a worker in its own session, reparented to init; True in the worker, False in the
    caller, which returns to Slurm at once. Slurm keeps a job COMPLETING (and, seen on 22.05,
    schedules nothing new on its nodes) while EpilogSlurmctld runs: the report's work must not
    hold the cluster. The worker keeps its own bound (watchdog) and writes the pending marker,
    so a report it cannot finish is finished later (sweep_pending)."""
    cost.before_fork()
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)  # the middle child exits at once
        return False
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        # Let go of whatever the caller reads (Slurm may wait for EOF on the hook's output).
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        return True
    except BaseException:
        os._exit(0)
