"""What the job epilog knows of the job besides its task logs: Slurm's final state and reason,
the nodes' records (waited for, read as root), which of their root facts check (the "trusted"
part of verdict.json), and the facts handed to the classifier."""

from __future__ import annotations

import json
import os
import re
import stat
import time
from contextlib import suppress
from typing import Any

from gpualert_slurm.core import slurm
from gpualert_slurm.core.slurm_records import FINAL_STATES
from gpualert_slurm.core.spool import SpoolError
from gpualert_slurm.hooks.job_epilog.context import JobEpilog
from gpualert_slurm.hooks.jobspool import (
    JobSpool,
    TaskLog,
    exit_code2,
    last_output,
    node_file_name,
    restart_count,
)

# While EpilogSlurmctld runs the job is COMPLETING; Reason= already says how it ended.
REASON_STATE = {"NonZeroExitCode": "FAILED", "OutOfMemory": "OUT_OF_MEMORY",
                "TimeLimit": "TIMEOUT", "NodeDown": "NODE_FAIL", "Prolog": "FAILED",
                "Preempted": "PREEMPTED", "DeadLine": "DEADLINE", "BootFail": "BOOT_FAIL"}
SLURM_CALL_S = 5.0
REQUEUED_WAIT_S = 3.0


def ended_attempt(jobid: str, env: dict[str, str], started_at: float) -> int:
    """The attempt whose end this job epilog reports. When Slurm requeues a run (scontrol
    requeue, a node failure), it counts the restart before it starts EpilogSlurmctld
    (job_mgr.c `_job_requeue_op`: `restart_cnt++`, then deallocate_nodes), so the requeued
    run 0's epilog reads SLURM_JOB_RESTART_COUNT=1. Taken as is, that epilog judged the next
    run's logs with run 0's exit once run 1 had started, and recovery requeued a job whose
    run 1 had just succeeded (CI). Slurm's record of that count tells the two apart: a run
    that has not ended (pending, running, or a requeued job still completing the run before,
    whose EndTime is the next run's expected end), or one that ended after this epilog was
    started (whole seconds), is not the run this epilog reports: that is the one before."""
    n = restart_count(env)
    if n == 0:
        return 0
    try:
        st = slurm.show_job(jobid, timeout=SLURM_CALL_S)
    except slurm.SlurmError:
        return n
    if st.restarts != n:
        return n
    if st.state in ("PENDING", "CONFIGURING", "RUNNING", "SUSPENDED"):
        return n - 1
    end = slurm.parse_time(st.raw.get("EndTime"))
    return n - 1 if end is not None and end > started_at else n


def slurm_facts(jobid: str, env: dict[str, str], batch_signal: int | None = None,
                attempt: int | None = None) -> dict[str, Any]:
    """Final state, reason and the job's record as slurmctld has it now (COMPLETING): the final
    state is inferred from Reason and the exit code, as sacct will record it. `attempt`: the
    run that ended (ended_attempt), else the environment's restart count."""
    run = restart_count(env) if attempt is None else attempt
    code, sig = exit_code2(env)
    out: dict[str, Any] = {"exit_code": code, "signal": sig, "slurm_state": None,
                           "slurm_reason": None, "record": {}, "error": None,
                           "identity_mismatch": []}
    try:
        st = slurm.show_job(jobid, timeout=SLURM_CALL_S)
        out["record"], out["identity_mismatch"] = identity_from_env(st.raw, env)
        out["slurm_reason"] = st.reason
        if code is None:
            code, sig = st.exit_code.code, st.exit_code.signal
            out["exit_code"], out["signal"] = code, sig
        if st.final:
            out["slurm_state"] = st.state
        elif st.state == "PENDING" or st.restarts > run:
            # Slurm has requeued this run: the record is the next run's (Reason=BeginTime,
            # its future StartTime), so this run's end and window come from accounting.
            nodes = env.get("SLURM_JOB_NODELIST") or ""
            out.update(requeued_run(jobid, st, code, sig, slurm.expand_hostlist(nodes)
                                    if nodes not in ("", "(null)") else list(st.nodes)))
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


# slurmctld hands EpilogSlurmctld the job's identity in its environment: where the record differs
# (it cannot, short of a parser fault or a forged record), the environment wins and it is said.
_IDENTITY_ENV = (("SLURM_JOB_USER", "UserId"), ("SLURM_JOB_UID", "UserId"),
                 ("SLURM_JOB_ACCOUNT", "Account"), ("SLURM_JOB_PARTITION", "Partition"))


def identity_from_env(record: dict[str, str], env: dict[str, str]
                      ) -> tuple[dict[str, str], list[str]]:
    """(The record with Slurm's environment's user, uid, account and partition in it, each
    field that disagreed as 'Key: record value != environment value')."""
    rec, mismatch = dict(record), []
    user, _, uid = rec.get("UserId", "").partition("(")
    have = {"SLURM_JOB_USER": user, "SLURM_JOB_UID": uid.rstrip(")"),
            "SLURM_JOB_ACCOUNT": rec.get("Account", ""),
            "SLURM_JOB_PARTITION": rec.get("Partition", "")}
    for var, key in _IDENTITY_ENV:
        want = env.get(var)
        if want and have[var] != want:
            mismatch.append(f"{key}: {have[var][:80]!r} from Slurm's record, {want!r} from "
                            f"{var}")
            have[var] = want
    if mismatch:
        rec["UserId"] = f"{have['SLURM_JOB_USER']}({have['SLURM_JOB_UID']})"
        rec["Account"], rec["Partition"] = have["SLURM_JOB_ACCOUNT"], have["SLURM_JOB_PARTITION"]
    return rec, mismatch


# slurmstepd writes its memory kill into the job's StdOut file itself, not through the task's
# output (which the tap logs): an OverMemoryKill then reads FAILED 0:9 with no line in the logs
# (issue 32). Its lines, as the 22.05-26.05 sources print them (src/slurmd/slurmstepd/).
_STEPD_LINE = re.compile(r"^slurmstepd(?:-[\w.-]+)?: error: .*(?:[Ee]xceeded (?:job |step )?memory "
                         r"limit|Detected \d+ oom[-_]kill event)")
_PATTERN = re.compile(r"%(\d*)([%AaJjNnstuxb])")


def output_path(rec: dict[str, str], user: str) -> str:
    """The batch step's StdOut file as slurmstepd names it: Slurm's JSON keeps the pattern
    (`slurm-%j.out`), which slurmstepd expands for the batch step (task 0, node rank 0, on the
    batch host); "" for one that cannot be told (a pattern this does not know)."""
    pattern = str(rec.get("StdOut") or "")
    job = rec.get("JobId", "")
    array_job, task = rec.get("ArrayJobId"), rec.get("ArrayTaskId")
    node = rec.get("BatchHost") or (slurm.expand_hostlist(rec.get("NodeList", "")) or [""])[0]
    values = {"%": "%", "A": array_job or job, "a": task or "4294967294", "J": f"{job}.batch",
              "j": job, "N": node.split(".")[0], "n": "0", "s": "batch", "t": "0", "u": user,
              "x": rec.get("JobName", ""), "b": str(int(task) % 10) if task else "0"}

    def one(m: re.Match[str]) -> str:
        v = values[m.group(2)]
        return v.zfill(int(m.group(1))) if m.group(1) and v.isdigit() else v
    out = _PATTERN.sub(one, pattern)
    return "" if "%" in _PATTERN.sub("", pattern).replace("%%", "") else out
STDOUT_TAIL = 64 * 1024
STDOUT_LINES = 20


def _tail_of(path: str) -> bytes:
    """The last STDOUT_TAIL bytes of a regular file (run as the job's user)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return b""
        return os.pread(fd, STDOUT_TAIL, max(0, st.st_size - STDOUT_TAIL))
    finally:
        os.close(fd)


def slurm_output(sf: dict[str, Any], env: dict[str, str], timeout_s: float = 2.0
                 ) -> tuple[str, list[str]] | None:
    """(the job's StdOut file, slurmstepd's memory-kill lines in its tail), or None. The file
    is the user's: read in a child as the job's user (never root's view of the filesystem),
    its last 64 KiB only, within timeout_s. What it says is the job's (provenance job), like
    anything the job printed; Slurm's word is its state and accounting."""
    from gpualert_slurm.core.artifacts import Forked

    path = output_path(sf.get("record") or {}, env.get("SLURM_JOB_USER", ""))
    uid, gid = env.get("SLURM_JOB_UID", ""), env.get("SLURM_JOB_GID", "")
    if not gid.isdigit() and uid.isdigit():
        with suppress(KeyError):
            import pwd

            gid = str(pwd.getpwuid(int(uid)).pw_gid)
    if not path.startswith("/") or path == "/dev/null" or not uid.isdigit() \
            or not gid.isdigit():
        return None
    try:
        data = Forked(lambda: _tail_of(path), int(uid), int(gid)).result(timeout_s)
    except Exception:
        return None
    if not isinstance(data, bytes):
        return None
    lines = [ln[:300] for ln in data.decode("utf-8", "replace").splitlines()
             if _STEPD_LINE.match(ln)]
    return (path, lines[-STDOUT_LINES:]) if lines else None


def run_times(sf: dict[str, Any], now: float) -> tuple[float | None, float]:
    """This run's start and end: Slurm's record, or accounting's for a run Slurm requeued
    (the record is the next run's, its StartTime to come)."""
    if sf.get("requeued"):
        start, end = sf.get("run_window") or (None, None)
        return start, end or now
    rec = sf.get("record") or {}
    return slurm.parse_time(rec.get("StartTime")), slurm.parse_time(rec.get("EndTime")) or now


def requeued_run(jobid: str, st: slurm.JobState, code: int | None, sig: int | None,
                 nodes: list[str]) -> dict[str, Any]:
    """slurm_state and this run's start/end for a run Slurm has requeued: its accounting record
    (NODE_FAIL, PREEMPTED, ...; waited for up to REQUEUED_WAIT_S, slurmdbd lags), else
    NODE_FAIL when a node of the run is down now, else what the exit code says."""
    deadline = time.monotonic() + REQUEUED_WAIT_S
    ended = None
    while ended is None:
        with suppress(slurm.SlurmError):
            ended = next((r for r in reversed(slurm.attempt_records(jobid, SLURM_CALL_S))
                          if r.state in FINAL_STATES | {"REQUEUED"}), None)
        if ended is not None or time.monotonic() >= deadline:
            break
        time.sleep(0.3)
    out: dict[str, Any] = {"requeued": True}
    if ended is not None:
        out["run_window"] = [ended.start, ended.end]
    if ended is not None and ended.state not in ("REQUEUED", "COMPLETED"):
        out["slurm_state"] = ended.state
    elif st.failed_node or any(node_is_down(n) for n in nodes):
        out["slurm_state"] = "NODE_FAIL"
    elif st.reason in REASON_STATE:
        out["slurm_state"] = REASON_STATE[st.reason]
    else:
        out["slurm_state"] = ("COMPLETED" if not code and not sig else
                              "CANCELLED" if sig else "FAILED")
    return out


def wait_node_verdicts(js: JobSpool, nodes: list[str], bound_s: float) -> dict[str, Any]:
    """node -> its verdict record (read as root: root-owned, no link), waiting up to bound_s for
    all of them; missing ones are absent from the result."""
    deadline = time.monotonic() + bound_s
    got: dict[str, Any] = {}
    while True:
        try:
            nfd = js.subdir("nodes")
        except (OSError, SpoolError) as e:
            # a nodes/ that is a file, a link or another's dir gets no verdict, ever: no wait
            # (twelve such jobs held the queue's slots 22.5 s each: issue 28)
            why = f"the job's nodes/ was refused: {e}"
            return {**got, **{n: {"error": why} for n in nodes if n not in got}}
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



def classify_facts(ctx: JobEpilog, sf: dict[str, Any], nvml: dict[str, Any], now: float
                   ) -> dict[str, Any]:
    """The JobFacts fields for the classifier (docs/CLASSIFY-API.md)."""
    end = run_times(sf, now)[1]
    lo = last_output(ctx.tasks)
    hang = ctx.opts.hang_s if ctx.opts.hang_s is not None else ctx.cfg.hang_s
    return {"exit_code": sf["exit_code"], "signal": sf["signal"] or None,
            "slurm_state": sf["slurm_state"], "slurm_reason": sf["slurm_reason"],
            "nvml": nvml or None, "hang_threshold_s": float(hang) if hang else None,
            "silence_s": (end - lo) if lo and end else None}


MAX_GAP_NOTES = 4


def log_flushed(exit_rec: dict[str, Any]) -> bool | None:
    """An exit record's log_flushed: True when the copier had written the task's whole output
    when the task ended, False when not, None when no copier answered (or the task was not
    tapped). A record the plugin wrote before the field was renamed says log_drained (such
    records may still be in the spool after an upgrade)."""
    v = exit_rec.get("log_flushed", exit_rec.get("log_drained"))
    return v if isinstance(v, bool) else None


def log_gap_notes(tasks: list[TaskLog]) -> list[str]:
    """What the tap could not log, from the exit records (spank/README.md): output dropped while
    the spool lagged (log_gaps), and logs not complete when the task ended (log_flushed false).
    Slurm's own output file has every byte; the evidence may not."""
    out = []
    for t in tasks:
        e = t.exit or {}
        gaps, lost = e.get("log_gaps"), e.get("log_gap_bytes")
        if isinstance(gaps, int) and gaps > 0 and isinstance(lost, int):
            out.append(f"{t.name}: {lost} bytes of the task's output are not in this log "
                       f"({gaps} gap(s): the spool did not keep up); the job's own output file "
                       "has them")
        elif log_flushed(e) is False:
            out.append(f"{t.name}: the log was not complete when the task ended (the spool was "
                       "slow); the evidence may miss the task's last lines")
    if len(out) > MAX_GAP_NOTES:
        out[MAX_GAP_NOTES - 1:] = [f"{len(out) - MAX_GAP_NOTES + 1} more task logs with gaps "
                                   "or not complete (their .exit records say how much)"]
    return out



def trusted_facts(ctx: JobEpilog, node_recs: dict[str, Any], sf: dict[str, Any], now: float
                  ) -> dict[str, Any]:
    """verdict.json's "trusted": what Slurm said (this hook's environment, given by
    slurmctld, and scontrol; never job.json) and, per node Slurm lists, whether its record's
    root facts check (provenance.verify: the MUNGE seal, decoded once here) and which of its
    driver lines fall in Slurm's window. Recovery acts on nodes by these alone."""
    from gpualert_slurm.core import provenance

    env, cfg, js = ctx.env, ctx.cfg, ctx.spool
    rec = sf.get("record") or {}
    nodelist = env.get("SLURM_JOB_NODELIST") or rec.get("NodeList") or ""
    nodes = slurm.expand_hostlist(nodelist) if nodelist not in ("", "(null)") else []
    start, end = run_times(sf, now)
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



def nodes_to_wait_for(nodes: list[str], sf: dict[str, Any]) -> list[str]:
    """A node Slurm calls DOWN runs no Epilog: waiting for its verdict only delays the report
    (and recovery) by the whole bound."""
    node_lost = sf.get("slurm_state") == "NODE_FAIL" or "Node" in str(sf.get("slurm_reason"))
    return [n for n in nodes if not node_is_down(n)] if node_lost else nodes
