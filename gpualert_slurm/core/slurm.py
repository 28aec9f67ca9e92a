"""A small client over Slurm's own commands (squeue, sacct, scontrol, scancel).

Everything goes through the command-line tools, never libslurm, so the same code works on any
Slurm the site runs (checked on 22.05; the JSON shapes of 23.x/24.x are handled too). Every call
has a timeout, and every failure - command missing, non-zero exit, timeout, unparsable output -
raises `SlurmError` with a message a person can act on. What the commands print is parsed in
slurm_records.py (the records as values, each Slurm version's shapes); this module runs the
commands, asks and acts.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpualert_slurm.core.slurm_records import (
    ACCT_FIELDS,
    SACCT_DELIM,
    JobNotFound,
    JobState,
    NodeInfo,
    SlurmError,
    base_state,
    expand_hostlist,
    job_from_scontrol,
    json_number,
    load_json,
    parse_node_record,
    parse_sacct_table,
    parse_scontrol_record,
    parse_squeue_json,
    parse_time,
    record_from_json,
)

DEFAULT_TIMEOUT = 30.0


# ---------------------------------------------------------------------------------------------
# running commands


def run(args: Sequence[str], timeout: float = DEFAULT_TIMEOUT,
        env: Mapping[str, str] | None = None) -> str:
    """Run a Slurm command; return its stdout or raise SlurmError with what went wrong."""
    if not args:
        raise SlurmError("no command given")
    exe = shutil.which(args[0], path=(env or os.environ).get("PATH"))
    if exe is None:
        raise SlurmError(f"{args[0]}: command not found (is Slurm's client installed and on PATH?)")
    try:
        # errors="replace": job names, comments and paths are the user's bytes, and 22.05's
        # `squeue --json` holds every job's; one name with an invalid UTF-8 byte made every
        # read raise UnicodeDecodeError, every job's facts lost (third pass on issue 28)
        proc = subprocess.run([exe, *args[1:]], capture_output=True, text=True, timeout=timeout,
                              errors="replace", stdin=subprocess.DEVNULL,
                              env=dict(env) if env is not None else None)
    except subprocess.TimeoutExpired as e:
        raise SlurmError(f"{' '.join(args)}: no answer within {timeout:g} s") from e
    except OSError as e:
        raise SlurmError(f"{' '.join(args)}: cannot run: {e}") from e
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip() or f"exit status {proc.returncode}"
        if "Invalid job id" in msg:
            raise JobNotFound(f"{' '.join(args)}: {msg}")
        raise SlurmError(f"{' '.join(args)}: {msg}")
    return proc.stdout


# ---------------------------------------------------------------------------------------------
# queries


def _job_arg(job_id: int | str) -> str:
    text = str(job_id).strip()
    if not re.fullmatch(r"\d+(_\d+)?", text):
        raise SlurmError(f"bad job id {job_id!r}: expected a number such as 1234")
    return text


def show_job(job_id: int | str, timeout: float = DEFAULT_TIMEOUT) -> JobState:
    """The controller's view of a job, from Slurm's structured output only (JobNotFound once
    it is purged). A job's name, comment, work dir and paths are the user's free text: parsed
    from `scontrol -o`'s `Key=Value` line, `-J 'x UserId=root(0)'` became Slurm's UserId
    (issue 28), so root never reads a job's facts from that text."""
    jid = _job_arg(job_id)
    jobs, source = _job_documents(jid, timeout)
    base, _, task = jid.partition("_")
    for job in jobs:
        if not isinstance(job, dict):
            continue
        if task:
            hit = (json_number(job.get("array_job_id")) == int(base)
                   and json_number(job.get("array_task_id"), -1) == int(task))
        else:
            hit = json_number(job.get("job_id")) == int(base)
        if hit:
            return job_from_scontrol(record_from_json(job), source=source)
    raise JobNotFound(f"{source} {jid}: no record for this job")


_scontrol_json: bool | None = None  # whether this Slurm's scontrol takes --json (23.02+)


def _job_documents(jid: str, timeout: float) -> tuple[list[Any], str]:
    """The "jobs" of Slurm's JSON for a job: `scontrol show job --json` (23.02+: one job, one
    RPC), else `squeue --json` (22.05: its scontrol has no --json, and its squeue ignores -j,
    so this is every job slurmctld holds, filtered by the caller)."""
    global _scontrol_json
    if _scontrol_json is not False:
        try:
            out = run(["scontrol", "show", "job", "--json", jid], timeout=timeout)
            _scontrol_json = True
            return load_json(out, "scontrol show job --json").get("jobs") or [], "scontrol"
        except JobNotFound:
            raise
        except SlurmError as e:
            if _scontrol_json or not re.search(r"unrecognized option|invalid option", str(e)):
                raise
            _scontrol_json = False
    out = run(["squeue", "--json"], timeout=timeout)
    return load_json(out, "squeue --json").get("jobs") or [], "squeue"


def mail_user(job_id: int | str, timeout: float = DEFAULT_TIMEOUT) -> str | None:
    """The job's --mail-user as Slurm keeps it; None when unset. Where the JSON lacks it (22.05)
    it is read from `scontrol -o`'s text: MailUser is the user's own free value, so a name that
    fools that parse gives nothing the user could not set with --mail-user itself."""
    st = show_job(job_id, timeout=timeout)
    if "MailUser" not in st.raw:
        # 22.05 prints MailUser after every free-text field of the job: the last one is Slurm's
        out = run(["scontrol", "show", "job", "-o", _job_arg(job_id)], timeout=timeout)
        found = re.findall(r"(?:^|\s)MailUser=(\S*)", out.split("\n", 1)[0])
        value = found[-1] if found else ""
    else:
        value = st.raw["MailUser"]
    value = value.strip()
    return value if value and value not in ("(null)", "None") else None


def queue(user: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> list[JobState]:
    """Jobs slurmctld still holds (`squeue --json`; filtered here: 22.05 ignores -u/-j)."""
    args = ["squeue", "--json"]
    if user:
        args += ["-u", user]
    jobs = parse_squeue_json(run(args, timeout=timeout))
    return [j for j in jobs if not user or j.user == user]


def accounting(job_id: int | str, timeout: float = DEFAULT_TIMEOUT) -> JobState:
    """The accounting record of a job and its steps: its last run if it was requeued.

    Uses sacct's delimited table, not `sacct --json`: 22.05's JSON reports a job that exited 3
    as return_code 0 (seen), while the table says 3:0.
    """
    jid = _job_arg(job_id)
    args = ["sacct", "-n", "-P", f"--delimiter={SACCT_DELIM}", "-j", jid,
            "-o", ",".join(ACCT_FIELDS)]
    jobs = [j for j in parse_sacct_table(run(args, timeout=timeout), fields=ACCT_FIELDS)
            if str(j.job_id) == jid.split("_")[0]]
    if not jobs:
        raise JobNotFound(f"sacct -j {jid}: no accounting record (yet)")
    return jobs[-1]


@dataclass(frozen=True)
class AttemptRecord:
    """One run of a job in accounting (`sacct --duplicates -X`): a requeued job has one per
    run, in the order they ran."""

    state: str
    start: float | None
    end: float | None


def attempt_records(job_id: int | str, timeout: float = DEFAULT_TIMEOUT) -> list[AttemptRecord]:
    """Each run of the job as accounting holds it, oldest first (the last may be the one still
    pending). The job epilog of a run that Slurm requeued reads its run's end here: by then
    scontrol shows the next run (PENDING, Reason=BeginTime, its future StartTime)."""
    jid = _job_arg(job_id)
    fields = ("JobIDRaw", "State", "Start", "End")
    out = run(["sacct", "-n", "-P", "-X", "--duplicates", f"--delimiter={SACCT_DELIM}", "-j",
               jid, "-o", ",".join(fields)], timeout=timeout)
    recs = []
    for line in out.splitlines():
        cols = line.split(SACCT_DELIM)
        if len(cols) != len(fields) or cols[0] != jid.split("_")[0]:
            continue
        recs.append(AttemptRecord(state=base_state(cols[1]), start=parse_time(cols[2]),
                                  end=parse_time(cols[3])))
    return recs


def settled_final(job_id: int | str, timeout: float = 120.0,
                  poll: float = 1.0) -> JobState | None:
    """Wait (bounded) for a job's final accounting record, or return None at the deadline.

    Just after a job ends sacct may show a half-written record: seen on 22.05, COMPLETED with
    NodeList=n1 and AllocNodes=3 for an n[1-3] job (the batch step's node), until the job's
    start record reaches slurmdbd, sometimes after its end record. So the record counts only
    once slurmctld no longer calls the job COMPLETING, its node list is whole (as many nodes
    as allocated, the same as slurmctld's while it still remembers the job) and two reads
    `poll` s apart agree. Steps' exit codes may still lag (a cancelled batch step read 0:0
    and later 0:15); the job's own state and exit code do not.
    """
    deadline = time.monotonic() + timeout
    previous: JobState | None = None
    while time.monotonic() < deadline:
        try:
            current: JobState | None = accounting(job_id)
        except JobNotFound:
            current = None
        ok = False
        if current is not None and current.final and (
                current.alloc_nodes == 0 or len(current.nodes) == current.alloc_nodes):
            try:
                ctl = show_job(job_id)
                ok = ctl.final and (not ctl.nodes or ctl.nodes == current.nodes)
            except JobNotFound:
                ok = True
        if ok and previous == current:
            return current
        previous = current if ok else None
        time.sleep(poll)
    return None


def job_state(job_id: int | str, timeout: float = DEFAULT_TIMEOUT) -> JobState:
    """Best current view: scontrol while slurmctld remembers the job, else sacct."""
    try:
        return show_job(job_id, timeout=timeout)
    except JobNotFound:
        return accounting(job_id, timeout=timeout)


# ---------------------------------------------------------------------------------------------
# actions


def _kv_args(fields: Mapping[str, Any]) -> list[str]:
    out = []
    for key, value in fields.items():
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", key):
            raise SlurmError(f"bad scontrol field name {key!r}")
        out.append(f"{key}={value}")
    return out


def requeue(job_id: int | str, hold: bool = False, timeout: float = DEFAULT_TIMEOUT) -> None:
    run(["scontrol", "requeuehold" if hold else "requeue", _job_arg(job_id)], timeout=timeout)


def release(job_id: int | str, timeout: float = DEFAULT_TIMEOUT) -> None:
    run(["scontrol", "release", _job_arg(job_id)], timeout=timeout)


def update_job(job_id: int | str, timeout: float = DEFAULT_TIMEOUT, **fields: Any) -> None:
    """`scontrol update jobid=<id> Key=Value ...`, e.g. update_job(12, ExcNodeList="n2")."""
    if not fields:
        raise SlurmError("update_job: no fields to change")
    run(["scontrol", "update", f"jobid={_job_arg(job_id)}", *_kv_args(fields)], timeout=timeout)


def update_node(node: str, state: str, reason: str | None = None,
                timeout: float = DEFAULT_TIMEOUT) -> None:
    """`scontrol update nodename=<n> state=<s> [reason=...]` (reasons may hold spaces)."""
    if not re.fullmatch(r"[A-Za-z0-9_.\-\[\],]+", node or ""):
        raise SlurmError(f"bad node name {node!r}")
    args = ["scontrol", "update", f"nodename={node}", f"state={state}"]
    if reason is not None:
        args.append(f"reason={reason}")  # one argv element: no shell quoting needed
    run(args, timeout=timeout)


def cancel(job_id: int | str, signal: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> None:
    args = ["scancel"]
    if signal:
        args += ["--signal", signal]
    run([*args, _job_arg(job_id)], timeout=timeout)


def node_states(nodes: Iterable[str] | None = None,
                timeout: float = DEFAULT_TIMEOUT) -> dict[str, str]:
    """node name -> state as sinfo prints it (idle, down*, drained, mixed, ...)."""
    out = run(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=timeout)
    states: dict[str, str] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2:
            states[parts[0]] = parts[1]
    if nodes is not None:
        wanted = set(nodes)
        states = {n: s for n, s in states.items() if n in wanted}
    return states


def node_info(node: str, timeout: float = DEFAULT_TIMEOUT) -> NodeInfo:
    """State and reason of one node (`scontrol show node -o NODE`)."""
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", node or ""):
        raise SlurmError(f"bad node name {node!r}")
    out = run(["scontrol", "show", "node", "-o", node], timeout=timeout)
    for line in out.splitlines():
        rec = parse_scontrol_record(line)
        if rec.get("NodeName") == node:
            return parse_node_record(rec)
    raise SlurmError(f"scontrol show node {node}: no record for this node")


def nodes_info(timeout: float = DEFAULT_TIMEOUT) -> list[NodeInfo]:
    """Every node's state and reason in one call (`scontrol show node -o`)."""
    out = run(["scontrol", "show", "node", "-o"], timeout=timeout)
    return [parse_node_record(rec) for rec in map(parse_scontrol_record, out.splitlines())
            if rec.get("NodeName")]


def partition_nodes(partition: str, timeout: float = DEFAULT_TIMEOUT) -> list[str]:
    """The nodes of a partition (`sinfo -p`), each once."""
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", partition or ""):
        raise SlurmError(f"bad partition name {partition!r}")
    out = run(["sinfo", "-h", "-p", partition, "-o", "%N"], timeout=timeout)
    names: list[str] = []
    for line in out.split():
        names.extend(n for n in expand_hostlist(line) if n not in names)
    return names
