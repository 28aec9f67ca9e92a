"""`gpualert hook epilog-slurmctld`: the job epilog, once per job on the controller.

Waits (bounded) for the nodes' verdicts, asks Slurm for the job's final state and reason,
classifies all ranks together, writes <attempt dir>/verdict.json, bundles logs and artifacts
under the budget, renders the report and hands it to gpualert_slurm.notify (outbox first, so a
dead relay loses nothing). Job arrays get one summary per array unless the site asks for one
report per task. Bounded: epilog_wait_s for the nodes plus hook_timeout_s for the rest, within
the shim's timeout; returns 0 whatever happens.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from contextlib import suppress
from typing import Any

from gpualert_slurm.core import slurm
from gpualert_slurm.core.config import Config, ReportConfig
from gpualert_slurm.core.options import Options
from gpualert_slurm.core.spool import (
    SpoolError,
    open_dir,
    opened_dir,
    read_json_nofollow,
    write_json_atomic,
)
from gpualert_slurm.hooks import array_acct, cost
from gpualert_slurm.hooks.common import HookLog, Watchdog, load_config_logged, shim_bound_s
from gpualert_slurm.hooks.epilog import (
    VERDICT_VERSION,
    JobSpool,
    PendingVerdict,
    TaskLog,
    classify_tasks,
    close_task_logs,
    exit_code2,
    job_options,
    job_spool,
    last_output,
    node_file_name,
    open_job_spool,
    open_task_logs,
    process_age,
    restart_count,
)

STATE_DIR = ".gpualert"  # <spool>/.gpualert: root's own state (array summaries, rate caps)
# While EpilogSlurmctld runs the job is COMPLETING; Reason= already says how it ended.
REASON_STATE = {"NonZeroExitCode": "FAILED", "OutOfMemory": "OUT_OF_MEMORY",
                "TimeLimit": "TIMEOUT", "NodeDown": "NODE_FAIL", "Prolog": "FAILED",
                "Preempted": "PREEMPTED", "DeadLine": "DEADLINE", "BootFail": "BOOT_FAIL"}
SLURM_CALL_S = 5.0


def report_cfg(cfg: Config) -> ReportConfig:
    return getattr(cfg, "report", None) or ReportConfig()


# ---- facts ----------------------------------------------------------------------------------

def slurm_facts(jobid: str, env: dict[str, str], batch_signal: int | None = None
                ) -> dict[str, Any]:
    """Final state, reason and the job's record as slurmctld has it now (COMPLETING): the final
    state is inferred from Reason and the exit code, as sacct will record it."""
    code, sig = exit_code2(env)
    out: dict[str, Any] = {"exit_code": code, "signal": sig, "slurm_state": None,
                           "slurm_reason": None, "record": {}, "error": None}
    try:
        st = slurm.show_job(jobid, timeout=SLURM_CALL_S)
        out["record"] = dict(st.raw)
        out["slurm_reason"] = st.reason
        if code is None:
            code, sig = st.exit_code.code, st.exit_code.signal
            out["exit_code"], out["signal"] = code, sig
        if st.final:
            out["slurm_state"] = st.state
        else:
            # A node failed under the job (23.02+ name it, FailedNode=; 24.11 says Reason=None
            # while it requeues such a job): NODE_FAIL, whatever the tasks' signals say.
            out["slurm_state"] = REASON_STATE.get(st.reason) or (
                "NODE_FAIL" if st.failed_node else
                "COMPLETED" if not code and not sig else "CANCELLED" if sig else "FAILED")
    except slurm.SlurmError as e:
        out["error"] = str(e)
        out["slurm_state"] = "COMPLETED" if not code and not sig else "FAILED"
    if out["slurm_state"] == "COMPLETED":
        # scancel leaves exit 0:0 and Reason=None while COMPLETING (seen on 22.05; sacct then
        # says CANCELLED 0:0): ask accounting, else go by the batch task's signal.
        try:
            acct = slurm.accounting(jobid, timeout=SLURM_CALL_S)
            if acct.final and acct.state != "COMPLETED":
                out["slurm_state"] = acct.state
        except slurm.SlurmError:
            pass
        if out["slurm_state"] == "COMPLETED" and batch_signal in (9, 15):
            out["slurm_state"] = "CANCELLED"
    return out


def wait_node_verdicts(js: JobSpool, nodes: list[str], bound_s: float) -> dict[str, Any]:
    """node -> its verdict record (read as root: root-owned, no link), waiting up to bound_s for
    all of them; missing ones are absent from the result."""
    deadline = time.monotonic() + bound_s
    got: dict[str, Any] = {}
    while True:
        nfd = None
        with suppress(OSError, SpoolError):
            nfd = js.subdir("nodes")
        if nfd is not None:
            try:
                for n in nodes:
                    if n in got:
                        continue
                    with suppress(FileNotFoundError):
                        try:
                            got[n] = read_node_record(f"{node_file_name(n)}.verdict.json", nfd)
                        except SpoolError as e:
                            got[n] = {"error": str(e)}
            finally:
                os.close(nfd)
        if len(got) == len(nodes) or time.monotonic() >= deadline:
            return got
        time.sleep(0.1)


def read_node_record(name: str, dir_fd: int) -> Any:
    """A node's record, read as root reads the user's directory (no link followed, no FIFO,
    size-capped), whoever owns it: a spool that squashes root makes root's own records
    nobody's, so its seal, not its owner, says whether root wrote it (provenance.verify).
    The file's owner, mode and links go with it under "_file" for that check."""
    import stat as _stat

    from gpualert_slurm.core.spool import MAX_RECORD_BYTES

    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not _stat.S_ISREG(st.st_mode):
            raise SpoolError(f"{name}: not a regular file: refused")
        if st.st_size > MAX_RECORD_BYTES:
            raise SpoolError(f"{name}: {st.st_size} bytes, more than {MAX_RECORD_BYTES}: refused")
        data = os.read(fd, MAX_RECORD_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_RECORD_BYTES:
        raise SpoolError(f"{name}: more than {MAX_RECORD_BYTES} bytes: refused")
    try:
        rec = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise SpoolError(f"{name}: not valid JSON: {e}") from None
    if not isinstance(rec, dict):
        raise SpoolError(f"{name}: not a JSON object")
    rec["_file"] = st
    return rec


def node_is_down(node: str) -> bool:
    """Slurm says the node is DOWN or not responding (its Epilog will not run); False when
    Slurm cannot tell, so that the wait stays as it was."""
    try:
        flags = slurm.node_info(node, timeout=3).flags
    except (slurm.SlurmError, OSError):
        return False
    return bool(flags & {"DOWN", "NOT_RESPONDING"})


def last_lines(t: TaskLog, n: int = 30, max_bytes: int = 64 * 1024) -> dict[str, Any]:
    start = max(t.size - max_bytes, 0)
    # NUL runs (a preallocated or sparse log) are not text anyone wants to see
    data = os.pread(t.fd, max_bytes, start).replace(b"\0", b"")
    lines = data.decode(errors="replace").splitlines()
    if start and len(lines) > 1:
        lines = lines[1:]  # a partial first line
    return {"file": t.path, "lines": [ln[:400] for ln in lines[-n:]]}


def pick_failing(tasks: list[TaskLog], verdict: dict[str, Any]) -> TaskLog | None:
    """The root rank's log, else the first task that failed, else the batch log."""
    rr, rs = verdict.get("root_rank"), verdict.get("root_step")
    for t in tasks:
        if rr is not None and t.rank == rr and (rs is None or t.step == str(rs)):
            return t
    for t in tasks:
        e = t.exit or {}
        if e.get("exit_code") or e.get("signal"):
            return t
    return next((t for t in tasks if t.step == "batch"), tasks[0] if tasks else None)


def classify_facts(cfg: Config, opts: Options, tasks: list[TaskLog], sf: dict[str, Any],
                   nvml: dict[str, Any], now: float) -> dict[str, Any]:
    """The JobFacts fields for the classifier (docs/CLASSIFY-API.md)."""
    rec = sf.get("record") or {}
    end = slurm.parse_time(rec.get("EndTime")) or now
    lo = last_output(tasks)
    hang = opts.hang_s if opts.hang_s is not None else cfg.hang_s
    return {"exit_code": sf["exit_code"], "signal": sf["signal"] or None,
            "slurm_state": sf["slurm_state"], "slurm_reason": sf["slurm_reason"],
            "nvml": nvml or None, "hang_threshold_s": float(hang) if hang else None,
            "silence_s": (end - lo) if lo and end else None}


MAX_GAP_NOTES = 4


def log_gap_notes(tasks: list[TaskLog]) -> list[str]:
    """What the tap could not log, from the exit records (spank/README.md): output dropped while
    the spool lagged (log_gaps), and logs not complete when the task ended (log_drained false).
    Slurm's own output file has every byte; the evidence may not."""
    out = []
    for t in tasks:
        e = t.exit or {}
        gaps, lost = e.get("log_gaps"), e.get("log_gap_bytes")
        if isinstance(gaps, int) and gaps > 0 and isinstance(lost, int):
            out.append(f"{t.name}: {lost} bytes of the task's output are not in this log "
                       f"({gaps} gap(s): the spool did not keep up); the job's own output file "
                       "has them")
        elif e.get("log_drained") is False:
            out.append(f"{t.name}: the log was not complete when the task ended (the spool was "
                       "slow); the evidence may miss the task's last lines")
    if len(out) > MAX_GAP_NOTES:
        out[MAX_GAP_NOTES - 1:] = [f"{len(out) - MAX_GAP_NOTES + 1} more task logs with gaps "
                                   "or not complete (their .exit records say how much)"]
    return out


def _node_summary(rec: Any) -> dict[str, Any]:
    """What verdict.json keeps of a node's record (which may still be at its evidence stage,
    without the node's own verdict)."""
    if not isinstance(rec, dict):
        return {"verdict": None, "kernel": None}
    return {"verdict": (rec.get("verdict") or {}).get("class"), "kernel": rec.get("kernel"),
            "stage": rec.get("stage"), "error": rec.get("error")}


def trusted_facts(env: dict[str, str], cfg: Config, js: JobSpool, node_recs: dict[str, Any],
                  sf: dict[str, Any], now: float) -> dict[str, Any]:
    """verdict.json's "trusted": what Slurm said (this hook's environment, given by
    slurmctld, and scontrol; never job.json) and, per node Slurm lists, whether its record's
    root facts check (provenance.verify: the MUNGE seal, decoded once here) and which of its
    driver lines fall in Slurm's window. Recovery acts on nodes by these alone."""
    from gpualert_slurm.core import provenance

    rec = sf.get("record") or {}
    nodelist = env.get("SLURM_JOB_NODELIST") or rec.get("NodeList") or ""
    nodes = slurm.expand_hostlist(nodelist) if nodelist not in ("", "(null)") else []
    start = slurm.parse_time(rec.get("StartTime"))
    end = slurm.parse_time(rec.get("EndTime")) or now
    pcfg = getattr(cfg, "provenance", None)
    socket = provenance.munge_socket(getattr(pcfg, "munge_socket", None), env)
    out: dict[str, Any] = {
        "slurm": {"nodes": nodes, "partition": env.get("SLURM_JOB_PARTITION")
                  or rec.get("Partition"), "user": env.get("SLURM_JOB_USER")
                  or (rec.get("UserId") or "").split("(")[0] or None,
                  "state": sf.get("slurm_state"), "reason": sf.get("slurm_reason"),
                  "start": start, "end": end, "error": sf.get("error")},
        "nodes": {}}
    todo = []
    for n in nodes:
        r = node_recs.get(n)
        if not isinstance(r, dict) or "error" in r and "root_facts" not in r:
            why = (r or {}).get("error") if isinstance(r, dict) else None
            out["nodes"][n] = {"verified": False, "origin": None,
                               "why": why or "no node record came", "driver": []}
        elif not provenance.has_facts(r):
            # nothing a check could let act or label (no kernel line, no NVML change): one
            # unmunge per node of a 1000-node job would eat the hook's bound
            empty = isinstance(r.get("root_facts"), dict)
            out["nodes"][n] = {"verified": False, "origin": None, "driver": [], "empty": empty,
                               "why": "no kernel lines or NVML changes to check" if empty
                               else "the record carries no root facts"}
        else:
            todo.append(n)
    # a driver line or a counter that moved first: those can act; the cap cuts the rest
    todo.sort(key=lambda n: not provenance.may_back(node_recs[n]))
    if len(todo) > provenance.MAX_CHECKS:
        for n in todo[provenance.MAX_CHECKS:]:
            out["nodes"][n] = {"verified": False, "origin": None, "driver": [],
                               "why": f"not checked: more than {provenance.MAX_CHECKS} nodes "
                                      "with kernel facts"}
        todo = todo[:provenance.MAX_CHECKS]

    def check(n: str) -> tuple[str, Any]:
        r = node_recs[n]
        return n, provenance.verify(r, r.get("_file"), str(env.get("SLURM_JOB_ID")),
                                    js.attempt, n, socket,
                                    bool(getattr(pcfg, "root_owned", True)))

    from concurrent.futures import ThreadPoolExecutor

    from gpualert_slurm.classify.node_trust import node_trust

    with ThreadPoolExecutor(max_workers=min(8, len(todo) or 1)) as pool:
        for n, checked in pool.map(check, todo):
            out["nodes"][n] = node_trust(node_recs[n], checked, start, end)
    return out


def sealed_view(rec: dict[str, Any], verified: Any) -> dict[str, Any]:
    """A node record whose root facts checked, with its kernel lines and NVML changes cut to
    what the seal covers. The seal covers root_facts only; the record's own "kernel" and
    "nvml" beside it are in the user's directory, and a user who keeps the sealed part and
    adds lines there would have them labelled "kernel log of <node>" (red-team pass)."""
    from gpualert_slurm.core.evidence import parse_iso_line

    rf = rec.get("root_facts")
    if not verified or not isinstance(rf, dict):
        return rec
    sealed = {(x.get("time"), x.get("text")) for x in (rf.get("kernel") or {}).get("lines")
              or [] if isinstance(x, dict)}
    k = dict(rec.get("kernel") or {})
    k["lines"] = [ln for ln in k.get("lines") or []
                  if isinstance(ln, str) and parse_iso_line(ln) in sealed]
    nv = rec.get("nvml")
    nv = dict(nv) if isinstance(nv, dict) else {}
    nv["changed"] = list((rf.get("nvml") or {}).get("changed") or [])
    return {**rec, "kernel": k, "nvml": nv}


def build_verdict(env: dict[str, str], cfg: Config, js: JobSpool, opts: Options,
                  tasks: list[TaskLog], node_recs: dict[str, Any], nodes: list[str],
                  sf: dict[str, Any], now: float, classify_s: float = 60.0,
                  early: PendingVerdict | None = None) -> dict[str, Any]:
    from gpualert_slurm.core import provenance

    rec = sf.get("record") or {}
    job = js.job
    trusted = trusted_facts(env, cfg, js, node_recs, sf, now)
    kernel: list[str] = []
    nvml: dict[str, Any] = {}
    gpus: dict[str, Any] = {}
    notes: list[str] = []
    for n in nodes:
        r = node_recs.get(n)
        if not isinstance(r, dict) or "error" in r:
            notes.append(f"node {n}: no node verdict"
                         + (f" ({r['error']})" if isinstance(r, dict) else
                            " within epilog_wait_s: its evidence is missing from this report"))
            continue
        r = sealed_view(r, (trusted["nodes"].get(n) or {}).get("verified"))
        k = r.get("kernel") or {}
        kernel += [f"{n}: {ln}" for ln in k.get("lines") or []]
        nvml[n] = r.get("nvml")
        if (r.get("nvml") or {}).get("changed"):
            notes.append(f"node {n}: GPU error counters changed during the job: "
                         f"{r['nvml']['changed']}")
    for n in nodes:
        with suppress(Exception):
            gpus[n] = (job.get("gpus") or {}).get(n)
    start = slurm.parse_time(rec.get("StartTime")) or job.get("start_time")
    end = slurm.parse_time(rec.get("EndTime")) or now
    if kernel or any((x or {}).get("changed") for x in nvml.values()) or early is None:
        if early is not None:
            early.cancel()
        verdict, err = classify_tasks(tasks, classify_facts(cfg, opts, tasks, sf, nvml, now),
                                      kernel, timeout_s=classify_s)
    else:
        verdict, err = early.result(classify_s)
    if err:
        notes.append(f"the classifier failed ({err}); the verdict is 'unknown'")
    provenance.annotate(verdict, trusted)
    notes += log_gap_notes(tasks)
    failed = (sf["slurm_state"] not in ("COMPLETED", None)) or bool(sf["exit_code"]) \
        or bool(sf["signal"])
    silent = (not failed and err is None
              and (verdict.get("class") not in ("success", None)
                   or bool(verdict.get("silent_failure"))))
    array_id = env.get("SLURM_ARRAY_JOB_ID") or rec.get("ArrayJobId")
    task_id = env.get("SLURM_ARRAY_TASK_ID") or rec.get("ArrayTaskId")
    failing = pick_failing(tasks, verdict)
    return {
        "version": VERDICT_VERSION,
        "job_id": env["SLURM_JOB_ID"],
        "attempt": js.attempt,
        "attempt_path": js.attempt_path,
        "logs_dir": os.path.join(js.attempt_path, "tasks"),
        "array": {"job_id": array_id, "task_id": task_id}
        if array_id and task_id not in (None, "", "N/A") else None,
        "job": {
            "name": rec.get("JobName") or env.get("SLURM_JOB_NAME"),
            "user": env.get("SLURM_JOB_USER") or job.get("user"),
            "uid": js.uid,
            "nodes": nodes,
            "nodelist": env.get("SLURM_JOB_NODELIST") or job.get("nodelist"),
            "gpus": gpus,
            "partition": env.get("SLURM_JOB_PARTITION") or job.get("partition"),
            "account": env.get("SLURM_JOB_ACCOUNT") or job.get("account"),
            "work_dir": rec.get("WorkDir") or env.get("SLURM_JOB_WORK_DIR")
            or job.get("work_dir"),
            "comment": rec.get("Comment"),
            "mail_user": rec.get("MailUser"),
            "start_time": start,
            "end_time": end,
            "run_time_s": (end - start) if start and end else None,
            "exit_code": sf["exit_code"],
            "signal": sf["signal"],
            "slurm_state": sf["slurm_state"],
            "slurm_reason": sf["slurm_reason"],
            "slurm_error": sf["error"],
        },
        "options": opts.to_json(),
        "failed": failed,
        "silent_failure": silent,
        "verdict": verdict,
        "classifier_error": err,
        "tasks": [t.info() for t in tasks],
        "nodes": {n: _node_summary(sealed_view(node_recs[n], (trusted["nodes"].get(n) or {})
                                              .get("verified"))
                                  if isinstance(node_recs.get(n), dict) else None)
                  for n in nodes},
        "trusted": trusted,
        "last_lines": last_lines(failing) if failing is not None else None,
        "notes": notes,
        "time": now,
    }


# ---- root's state: array summaries and rate caps --------------------------------------------

def state_dir(cfg: Config, sub: str) -> str:
    """<spool>/.gpualert/<sub>, root's, 0700 (the spool root is root's 0755, checked)."""
    path = os.path.join(cfg.spool, STATE_DIR, sub)
    os.makedirs(path, mode=0o700, exist_ok=True)
    for p in (os.path.dirname(path), path):
        st = os.lstat(p)
        if st.st_uid != 0 or not os.path.isdir(p) or os.path.islink(p):
            raise SpoolError(f"{p}: not root's own directory: refused")
    return path


class Locked:
    """flock on <dir>/<name>.lock and a JSON state file <dir>/<name>.json beside it."""

    def __init__(self, directory: str, name: str) -> None:
        self.dir, self.name = directory, name

    def __enter__(self) -> Locked:
        self.fd = os.open(os.path.join(self.dir, self.name + ".lock"),
                          os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        self.dfd = open_dir(self.dir)
        try:
            self.state = read_json_nofollow(self.name + ".json", self.dfd, owners=(0,))
        except (FileNotFoundError, SpoolError):
            self.state = {}
        return self

    def save(self) -> None:
        write_json_atomic(self.dfd, self.name + ".json", self.state, 0o600)

    def __exit__(self, *exc: object) -> None:
        os.close(self.dfd)
        os.close(self.fd)


def rate_ok(cfg: Config, user: str, now: float) -> bool:
    """At most max_per_user_hour reports to one user in the last hour (counted when sent)."""
    cap = report_cfg(cfg).max_per_user_hour
    safe = node_file_name(user or "unknown")
    try:
        with Locked(state_dir(cfg, "rate"), safe) as lk:
            times = [t for t in lk.state.get("sent", []) if now - t < 3600]
            ok = len(times) < cap
            if ok:
                times.append(now)
            lk.state = {"sent": times}
            lk.save()
    except OSError:  # a full or broken spool: the cap cannot count, the report still goes
        return True
    return ok


def per_array_ok(cfg: Config, v: dict[str, Any]) -> bool:
    """At most max_per_array per-task reports for one array (per_task mode)."""
    cap = report_cfg(cfg).max_per_array
    try:
        with Locked(state_dir(cfg, "arrays"), str(v["array"]["job_id"])) as lk:
            n = lk.state.get("per_task_sent", 0)
            if n >= cap:
                return False
            lk.state["per_task_sent"] = n + 1
            lk.save()
    except OSError:
        return True
    return True


def array_task_summary(v: dict[str, Any]) -> dict[str, Any]:
    verdict = v.get("verdict") or {}
    return {"job_id": v.get("job_id"), "task_id": (v.get("array") or {}).get("task_id"),
            "class": verdict.get("class"), "failed": bool(v.get("failed")
                                                          or v.get("silent_failure")),
            "hint": verdict.get("hint"), "root_node": verdict.get("root_node"),
            "root_rank": verdict.get("root_rank"), "evidence": (verdict.get("evidence") or [])[:4],
            "name": (v.get("job") or {}).get("name"), "user": (v.get("job") or {}).get("user"),
            "ran": True}


def remaining_array_tasks(array_id: str) -> tuple[set[str], set[str]] | None:
    """Task ids of the array whose job epilog is still to come: every task slurmctld still
    holds (all states), except those that ended without ever getting a node (cancelled while
    pending: no epilog runs for them), and those never-ran ones. None when Slurm cannot be
    asked."""
    try:
        # %F: the array's job id (%A is each task's own on 22.05 with -r); %K: the task id
        out = slurm.run(["squeue", "-h", "-r", "-t", "all", "-j", array_id,
                         "-o", "%F|%K|%T|%N"], timeout=SLURM_CALL_S)
    except slurm.SlurmError:
        return None
    left, never = set(), set()
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) != 4 or parts[0] != array_id:
            continue
        task, state, nodes = parts[1], parts[2], parts[3].strip()
        if state in slurm.FINAL_STATES and nodes in ("", "(null)"):
            never.add(task)
            continue
        left.add(task)
    return left, never


def array_begin(cfg: Config, array_id: str, task_id: str, own_job: str) -> None:
    """Mark this task's epilog as in flight, before the slow part: another task that finishes
    meanwhile then knows not to send the summary without it."""
    with Locked(state_dir(cfg, "arrays"), array_id) as lk:
        tasks = lk.state.setdefault("tasks", {})
        if task_id not in tasks:
            tasks[task_id] = {"task_id": task_id, "job_id": own_job, "in_flight": True,
                              "since": time.time()}
            lk.save()


def array_step(cfg: Config, v: dict[str, Any] | None, array_id: str, task_id: str,
               own_job: str, log: HookLog) -> dict[str, Any] | None:
    """Record this task in the array's state; return the array summary when this task is the
    last one to end (exactly one task sends it), else None. A task that never ran (no spool
    dir) is recorded as such, so an array cancelled before any task ran ends with no report and
    nothing left waiting; nothing here is ever retried."""
    with Locked(state_dir(cfg, "arrays"), array_id) as lk:
        tasks = lk.state.setdefault("tasks", {})
        tasks[task_id] = array_task_summary(v) if v else {"task_id": task_id,
                                                           "job_id": own_job, "ran": False}
        asked = remaining_array_tasks(array_id)
        left, never = asked if asked is not None else (None, set())
        for t in never - set(tasks):
            tasks[t] = {"task_id": t, "ran": False}
        done_ids = {t for t, rec in tasks.items() if not rec.get("in_flight")}
        # an epilog in flight for longer than any epilog can run has died: don't wait for it
        stale = {t for t, rec in tasks.items() if rec.get("in_flight")
                 and time.time() - rec.get("since", 0) > 600}
        waiting = {t for t, rec in tasks.items() if rec.get("in_flight")} - stale
        if left is not None:
            waiting |= left - done_ids - stale
        waiting.discard(task_id)
        if not waiting and not lk.state.get("sent"):
            # tasks slurmctld already forgot (MinJobAge) may still have an epilog to come
            lk.state["array_id"] = array_id
            waiting = array_acct.still_to_come(lk.state, done_ids | stale | {task_id},
                                                time.time())
        done = not waiting and not lk.state.get("sent")
        if done:
            lk.state["sent"] = time.time()
        lk.state["updated"] = time.time()
        lk.save()
        if not done:
            return None
        return {"array_id": array_id,
                "tasks": {t: r for t, r in tasks.items() if not r.get("in_flight")}}


def array_context(summary: dict[str, Any], spool: str) -> dict[str, Any]:
    from gpualert_slurm.report import header_text, labels

    ran = [t for t in summary["tasks"].values() if t.get("ran")]
    never = [t for t in summary["tasks"].values() if not t.get("ran")]
    failed = [t for t in ran if t.get("failed")]
    groups: dict[str, list[dict[str, Any]]] = {}
    for t in sorted(failed, key=lambda t: int(t["task_id"]) if str(t["task_id"]).isdigit()
                    else 0):
        groups.setdefault(t.get("class") or "unknown", []).append(t)
    name = next((t.get("name") for t in ran if t.get("name")), "")
    gl = [{"cls": c, "label": labels().get(c, c), "count": len(ts),
           "tasks": [str(t["task_id"]) for t in ts], "first": ts[0], "hint": ts[0].get("hint")}
          for c, ts in sorted(groups.items(), key=lambda kv: -len(kv[1]))]
    word = f"{len(failed)} of {len(ran)} tasks FAILED" if failed else f"all {len(ran)} tasks OK"
    classes = ", ".join(f"{g['label']} x{g['count']}" for g in gl[:3])
    headline = f"array {summary['array_id']}" + (f" ({header_text(name, 60)})" if name else "") \
        + f": {word}" + (f": {classes}" if classes else "")
    return {"array_id": summary["array_id"], "name": name, "total": len(ran),
            "failed": len(failed), "ok": len(ran) - len(failed), "never_ran": len(never),
            "groups": gl, "headline": headline, "spool": spool,
            "user": next((t.get("user") for t in ran if t.get("user")), None), "notes": []}


# ---- delivery -------------------------------------------------------------------------------

def deliver(cfg: Config, opts: Options, env: dict[str, str], subject: str, text: str,
            html: str, attachments: list[Any], job_id: str, mail_user: str | None,
            log: HookLog, timeout_s: float | None = None,
            inline: list[Any] = ()) -> dict[str, Any]:
    """Build the message and hand it to notify.submit (outbox first, bounded sending)."""
    from gpualert_slurm.report import build_message

    try:
        from gpualert_slurm import notify
    except ImportError as e:
        log.error(f"job {job_id}: notify is not available ({e}); report kept in verdict.json")
        return {"status": "not sent", "reason": f"notify unavailable: {e}"}
    env2 = dict(env)
    if mail_user and not env2.get("SLURM_JOB_MAIL_USER"):
        env2["SLURM_JOB_MAIL_USER"] = mail_user
    refused: list[Any] = []
    try:
        rcpts = notify.resolve_recipients(opts, env2, cfg)
        recipients = list(rcpts)
        refused = [list(r) for r in getattr(rcpts, "refused", [])]
    except Exception as e:
        log.error(f"job {job_id}: recipients: {e}")
        recipients = []
    if not recipients:
        log.error(f"job {job_id}: no permitted recipient (mail=, --mail-user, config rules): "
                  f"{refused}")
    msg = build_message(subject, text, html, sender=cfg.mail.sender, recipients=recipients,
                        attachments=[(a.filename, a.data, a.mime) for a in attachments],
                        job_id=job_id, inline=list(inline))
    try:
        d = notify.submit(msg, cfg=cfg, job_id=job_id, timeout_s=timeout_s)
    except Exception as e:  # submit promises not to raise; a hook never trusts that
        log.error(f"job {job_id}: notify.submit raised {e!r}")
        return {"status": "error", "reason": repr(e), "recipients": recipients}
    return {"status": getattr(d, "status", "?"), "reason": getattr(d, "reason", None),
            "outbox": getattr(d, "path", None), "recipients": recipients, "refused": refused}


def should_send(opts: Options, v: dict[str, Any]) -> bool:
    if opts.notify == "never":
        return False
    if opts.notify == "always":
        return True
    return bool(v.get("failed") or v.get("silent_failure"))


def _warm_up() -> None:
    """Compile the rules and the templates while scontrol answers (a subprocess: the GIL is
    free): the classifier's child inherits the rules, the report renders at once."""
    with suppress(Exception):
        from gpualert_slurm.classify import load_rules

        load_rules()
    with suppress(Exception):
        from gpualert_slurm.core.templates import get_template

        for name in ("report.txt.j2", "report.html.j2"):
            get_template(name)


def save_verdict(js: JobSpool, v: dict[str, Any], log: HookLog) -> bool:
    """verdict.json, atomically; a full or broken spool is logged, and the report still goes
    out (the mail carries the same content)."""
    try:
        write_json_atomic(js.attempt_fd, "verdict.json", v, 0o644)
        return True
    except OSError as e:
        log.error(f"job {v.get('job_id')}: cannot write verdict.json in {js.attempt_path}: {e}")
        return False


# ---- the hook -------------------------------------------------------------------------------

def job_epilog(env: dict[str, str], log: HookLog, watchdog: Watchdog) -> None:
    t0 = time.monotonic()
    jobid = env["SLURM_JOB_ID"]
    cfg = load_config_logged(log)
    if cfg is None:
        return
    # From now on: the shim's timeout counts from the process's start, and the interpreter's
    # start-up on a loaded controller is part of it.
    bound = max(1.0, min(cfg.epilog_wait_s + cfg.hook_timeout_s, shim_bound_s() - process_age()))
    watchdog.rearm(bound)
    log.set_spool(cfg.spool)
    opts = job_options(env, cfg, log)
    if not opts.monitored:
        return
    rc = report_cfg(cfg)
    os.environ.setdefault("GPUALERT_TEMPLATES", rc.templates)  # report.template_dirs()
    array_id = env.get("SLURM_ARRAY_JOB_ID", "")
    task_id = env.get("SLURM_ARRAY_TASK_ID", "")
    is_array = array_id.isdigit() and task_id.isdigit()
    uid_s = env.get("SLURM_JOB_UID", "")
    if not os.path.isdir(cfg.spool) or not uid_s.isdigit():
        log.error(f"job {jobid}: spool {cfg.spool} missing or SLURM_JOB_UID={uid_s!r} unusable;"
                  " no report")
        return
    uid = int(uid_s)
    try:
        js = open_job_spool(cfg.spool, jobid, uid, restart_count(env))
    except FileNotFoundError:
        log.info(f"job {jobid}: no spool dir (never started, or not monitored on its nodes)")
        if is_array:
            with suppress(Exception):
                s = array_step(cfg, None, array_id, task_id, jobid, log)
                if s is not None and any(t.get("ran") for t in s["tasks"].values()):
                    _send_array(cfg, opts, env, s, log)
        return
    except (OSError, SpoolError) as e:
        log.error(f"job {jobid}: {e}; no report")
        return
    tasks: list[TaskLog] = []
    v: dict[str, Any] | None = None
    marked = mark_pending(cfg, jobid, uid, js.attempt, env, log)
    try:
        if is_array and rc.arrays == "summary":
            try:
                array_begin(cfg, array_id, task_id, jobid)
            except OSError as e:
                log.error(f"job {jobid}: array {array_id} state: {e}")
        nodes = slurm.expand_hostlist(env.get("SLURM_JOB_NODELIST", "")) \
            if env.get("SLURM_JOB_NODELIST") else list(js.job.get("nodes") or [])
        # The time budget, from the hook's start: the nodes' evidence is waited for until
        # at most 45 % of the bound; the classifier may run until the send reserve; the
        # reserve (a quarter of the bound) is for artifacts, rendering and the outbox write,
        # so that a slow classifier or an overloaded controller still leaves the report
        # in the outbox before the watchdog ends the hook.
        reserve = max(6.0, bound / 4)
        wait = max(0.0, min(cfg.epilog_wait_s, bound - cfg.hook_timeout_s, 0.45 * bound))
        warm = threading.Thread(target=_warm_up, daemon=True)
        warm.start()
        tasks = open_task_logs(js)
        batch = next((t for t in tasks if t.step == "batch"), None)
        sf = slurm_facts(jobid, env, (batch.exit or {}).get("signal") if batch else None)
        # Classify while the nodes' evidence comes in; again only if it brings kernel lines
        # or moved GPU counters (rare), which the classifier must see.
        now = time.time()
        warm.join(max(0.0, bound / 4 - (time.monotonic() - t0)))
        early = PendingVerdict(tasks, classify_facts(cfg, opts, tasks, sf, {}, now), [])
        # A node Slurm calls DOWN runs no Epilog: waiting for its verdict only delays the
        # report (and recovery) by the whole bound.
        node_lost = sf.get("slurm_state") == "NODE_FAIL" or "Node" in str(sf.get("slurm_reason"))
        alive = [n for n in nodes if not node_is_down(n)] if node_lost else nodes
        node_recs = wait_node_verdicts(js, alive, max(0.0, wait - (time.monotonic() - t0)))
        left = bound - reserve - (time.monotonic() - t0)
        v = build_verdict(env, cfg, js, opts, tasks, node_recs, nodes, sf, now,
                          classify_s=max(1.0, left), early=early)
        save_verdict(js, v, log)
        log.info(f"job {jobid}: verdict {v['verdict'].get('class')} "
                 f"(state {sf['slurm_state']}, {len(tasks)} task logs, "
                 f"{len(node_recs)}/{len(nodes)} node verdicts) in {time.monotonic() - t0:.2f} s")
        per_task = not is_array or rc.arrays == "per_task"
        # Recovery decides (and records) before the report, so that the mail says what it
        # does and why, within what the send's reserve leaves; it acts after the report.
        left = bound - reserve - (time.monotonic() - t0)
        pre = _recover(cfg, js, v, log, left, act=False) if left >= 1.0 else None
        if should_send(opts, v) and per_task:
            _send_job(cfg, opts, env, js, tasks, v, log, t0, bound)
        elif not per_task:
            v["report"] = {"status": "in the array summary", "reason": None}
            save_verdict(js, v, log)
        # after the report is safe in the outbox: the actions get what time is left
        if pre is None or pre.get("outcome") in ("planned", "undecided", "error"):
            _recover(cfg, js, v, log, bound - (time.monotonic() - t0))
        if is_array and rc.arrays == "summary":
            try:
                s = array_step(cfg, v, array_id, task_id, jobid, log)
            except OSError as e:
                log.error(f"job {jobid}: array {array_id} state: {e}; no summary from this task")
                s = None
            if s is not None:
                _send_array(cfg, opts, env, s, log)
    except Exception as e:  # a bug of ours: the user still hears that the job failed
        log.error(f"job {jobid}: unexpected error: {e!r}")
        if v is None or "report" not in v:
            _fallback_report(cfg, opts, env, js, tasks, e, log, t0, bound)
    finally:
        close_task_logs(tasks)
        js.close()
    if marked:
        clear_pending(cfg, jobid)
    log.info(cost.line(jobid, "epilog-slurmctld"))
    # Spare time: finish the reports of job epilogs that an overloaded controller cut short.
    if bound - (time.monotonic() - t0) > max(6.0, bound / 4) * 2:
        with suppress(Exception):
            sweep_pending(cfg, log, deadline=t0 + bound - max(6.0, bound / 4))


# ---- reports that a killed job epilog left unfinished ----------------------------------------

PENDING_AFTER_S = 90.0  # older than any job epilog can run: its writer is gone
PENDING_TRIES = 3
PENDING_MAX_AGE_S = 86400.0


def mark_pending(cfg: Config, jobid: str, uid: int, attempt: int, env: dict[str, str],
                 log: HookLog) -> bool:
    """<spool>/.gpualert/pending/<jobid>.json, root's: removed once the report is handled.
    One left behind means this epilog was killed (watchdog, shim, overload): a later job
    epilog with time to spare finishes the report (sweep_pending)."""
    keep = ("SLURM_JOB_ID", "SLURM_JOB_USER", "SLURM_JOB_UID", "SLURM_JOB_NAME",
            "SLURM_JOB_EXIT_CODE2", "SLURM_JOB_EXIT_CODE", "SLURM_JOB_NODELIST",
            "SLURM_JOB_WORK_DIR", "SLURM_JOB_PARTITION", "SPANK_GPUALERT",
            "SLURM_JOB_MAIL_USER", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID")
    try:
        d = state_dir(cfg, "pending")
        with Locked(d, jobid) as lk:
            lk.state = {"job_id": jobid, "uid": uid, "attempt": attempt, "since": time.time(),
                        "tries": 0, "env": {k: env[k] for k in keep if k in env}}
            lk.save()
        return True
    except OSError as e:
        log.error(f"job {jobid}: pending marker: {e}")
        return False


def clear_pending(cfg: Config, jobid: str) -> None:
    d = os.path.join(cfg.spool, STATE_DIR, "pending")
    for suffix in (".json", ".lock"):
        with suppress(OSError):
            os.unlink(os.path.join(d, jobid + suffix))


def sweep_pending(cfg: Config, log: HookLog, deadline: float, limit: int = 3) -> int:
    """Finish up to `limit` reports left by killed job epilogs (markers older than
    PENDING_AFTER_S), each tried at most PENDING_TRIES times and for a day at most: never
    retried for ever. Returns how many were handled."""
    d = os.path.join(cfg.spool, STATE_DIR, "pending")
    try:
        names = sorted(n[:-5] for n in os.listdir(d) if n.endswith(".json"))
    except OSError:
        return 0
    done = 0
    now = time.time()
    for jobid in names:
        if done >= limit or time.monotonic() > deadline:
            break
        if not jobid.isdigit():
            continue
        try:
            fd = os.open(os.path.join(d, jobid + ".lock"),
                         os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # another sweeper (or the epilog itself) has it
            with opened_dir(d) as dfd:
                try:
                    m = read_json_nofollow(jobid + ".json", dfd, owners=(0,))
                except (OSError, SpoolError):
                    continue
                if now - float(m.get("since", now)) < PENDING_AFTER_S:
                    continue
                m["tries"] = int(m.get("tries", 0)) + 1
                if m["tries"] > PENDING_TRIES or now - float(m["since"]) > PENDING_MAX_AGE_S:
                    log.error(f"job {jobid}: report given up after {m['tries'] - 1} tries")
                    clear_pending(cfg, jobid)
                    continue
                write_json_atomic(dfd, jobid + ".json", m, 0o600)
            _finish_pending(cfg, m, log, deadline)
            clear_pending(cfg, jobid)
            done += 1
        finally:
            os.close(fd)
    return done


def _finish_pending(cfg: Config, m: dict[str, Any], log: HookLog, deadline: float) -> None:
    """The report of one job whose epilog was killed: from its verdict.json if that was
    written, else the least report."""
    env = dict(m.get("env") or {})
    jobid = str(m["job_id"])
    env["SLURM_JOB_ID"] = jobid
    opts = job_options(env, cfg, log)
    t0 = time.monotonic()
    bound = max(1.0, deadline - t0)
    with job_spool(cfg.spool, jobid, int(m["uid"]), int(m.get("attempt", 0))) as js:
        tasks = open_task_logs(js)
        try:
            try:
                v = read_json_nofollow("verdict.json", js.attempt_fd, owners=(0,))
            except (FileNotFoundError, SpoolError):
                v = None
            if isinstance(v, dict) and "report" in v:
                return
            if not isinstance(v, dict):
                _fallback_report(cfg, opts, env, js, tasks,
                                 RuntimeError("the job epilog was cut short"), log, t0, bound)
                return
            v.setdefault("notes", []).append(
                "this report was finished later: the job epilog that began it ran out of time")
            is_array = (v.get("array") or {}).get("task_id") is not None
            if should_send(opts, v) and (not is_array or report_cfg(cfg).arrays == "per_task"):
                _send_job(cfg, opts, env, js, tasks, v, log, t0, bound)
                log.info(f"job {jobid}: report finished by a later job epilog")
        finally:
            close_task_logs(tasks)


def _fallback_report(cfg: Config, opts: Options, env: dict[str, str], js: JobSpool,
                     tasks: list[TaskLog], err: Exception, log: HookLog, t0: float,
                     bound: float) -> None:
    """The least report: Slurm's exit code, the logs, and what went wrong in gpualert."""
    code, sig = exit_code2(env)
    v = {"version": VERDICT_VERSION, "job_id": env["SLURM_JOB_ID"], "attempt": js.attempt,
         "attempt_path": js.attempt_path, "logs_dir": os.path.join(js.attempt_path, "tasks"),
         "job": {"name": env.get("SLURM_JOB_NAME"), "user": env.get("SLURM_JOB_USER"),
                 "nodelist": env.get("SLURM_JOB_NODELIST"), "exit_code": code, "signal": sig,
                 "work_dir": env.get("SLURM_JOB_WORK_DIR")},
         "failed": bool(code or sig), "silent_failure": False,
         "verdict": {"class": "unknown", "domain": "unknown", "confidence": 0.0,
                     "hint": "gpualert could not analyse this job; its logs are complete.",
                     "detail": f"gpualert error: {type(err).__name__}: {err}"},
         "tasks": [], "notes": [f"gpualert error while writing this report: {err!r}"]}
    try:
        save_verdict(js, v, log)
        if should_send(opts, v):
            _send_job(cfg, opts, env, js, tasks, v, log, t0, bound, kind="fallback")
    except Exception as e:
        log.error(f"job {v['job_id']}: fallback report failed too: {e!r}")


def _recover(cfg: Config, js: JobSpool, v: dict[str, Any], log: HookLog, left: float,
             act: bool = True) -> dict[str, Any] | None:
    """Hand the verdict to the recovery policy (gpualert_slurm/recovery; act=False: decide
    only); what it decided goes into verdict.json's "recovery" for the report. Its failure
    never touches the epilog."""
    try:
        from gpualert_slurm import recovery

        r = recovery.on_verdict(cfg, v, log, time.monotonic() + max(1.0, left / 2), act=act)
        if r is not None:
            v["recovery"] = r
            save_verdict(js, v, log)
        return r
    except Exception as e:  # on_verdict promises not to raise; a hook never trusts that
        log.error(f"job {v.get('job_id')}: recovery: {e!r}")
        return {"outcome": "error"}


def _send_job(cfg: Config, opts: Options, env: dict[str, str], js: JobSpool,
              tasks: list[TaskLog], v: dict[str, Any], log: HookLog, t0: float,
              bound: float, kind: str = "report") -> None:
    """Bundle, render (templates `kind`.{txt,html}.j2: report, or fallback) and send."""
    from gpualert_slurm.core.artifacts import bundle_for_job
    from gpualert_slurm.report import inline_images, render, subject

    jobid = v["job_id"]
    rc = report_cfg(cfg)
    if v.get("array") and rc.arrays == "per_task" and not per_array_ok(cfg, v):
        v["report"] = {"status": "not sent",
                       "reason": f"cap of {rc.max_per_array} reports per array reached"}
        save_verdict(js, v, log)
        return
    if not rate_ok(cfg, v["job"].get("user") or "", time.time()):
        v["report"] = {"status": "not sent", "reason":
                       f"cap of {rc.max_per_user_hour} reports per user per hour reached"}
        save_verdict(js, v, log)
        log.error(f"job {jobid}: report not sent: {v['report']['reason']}")
        return
    budget = opts.budget_bytes or cfg.budget_bytes
    gid = _gid(js)
    left = bound - 2.0 - (time.monotonic() - t0)  # 2 s short of the watchdog
    globs = [*opts.artifacts, *rc.artifacts]
    short = left < max(6.0, bound / 4) / 2  # an overloaded controller: the mail goes first
    bundle = bundle_for_job(tasks, budget, js.uid, gid, v["job"].get("work_dir"),
                            [] if short else globs, timeout_s=max(1.0, left / 3))
    for g in globs if short else []:
        bundle.skip("artifact", g, None, "not collected: the job epilog ran out of time",
                    v["job"].get("work_dir") or "?")
    v["artifacts"] = bundle.manifest()
    save_verdict(js, v, log)
    left = bound - 2.0 - (time.monotonic() - t0)
    images = inline_images(v) if left > 4.0 else []  # the timeline of a multi-node failure
    d = deliver(cfg, opts, env, subject(v), render(v, "text", kind=kind),
                render(v, "html", tuple(c for c, _d, _m in images), kind), bundle.files,
                jobid, v["job"].get("mail_user"), log,
                timeout_s=max(1.0, min(left, cfg.notify.total_timeout_s)), inline=images)
    v["report"] = {"subject": subject(v), **d, "time": time.time()}
    save_verdict(js, v, log)
    log.info(f"job {jobid}: report {d.get('status')} ({d.get('reason') or 'ok'}) "
             f"in {time.monotonic() - t0:.2f} s")


def _send_array(cfg: Config, opts: Options, env: dict[str, str], s: dict[str, Any],
                log: HookLog) -> None:
    from gpualert_slurm.report import render_array

    a = array_context(s, cfg.spool)
    if not a["failed"] and opts.notify != "always":
        return
    if opts.notify == "never":
        return
    if not rate_ok(cfg, a.get("user") or "", time.time()):
        log.error(f"array {a['array_id']}: summary not sent: per-user cap reached")
        return
    subj = f"[gpualert] {a['headline']}"
    d = deliver(cfg, opts, env, subj, render_array(a, "text"), render_array(a, "html"), [],
                f"{a['array_id']}", None, log)
    log.info(f"array {a['array_id']}: summary {d.get('status')} ({d.get('reason') or 'ok'})")


def _gid(js: JobSpool) -> int:
    g = js.job.get("gid")
    if isinstance(g, int):
        return g
    import pwd

    try:
        return pwd.getpwuid(js.uid).pw_gid
    except KeyError:
        return js.uid


def dump(v: dict[str, Any]) -> str:
    return json.dumps(v, indent=1, sort_keys=True)
