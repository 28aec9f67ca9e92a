"""Slurm's records as values, and the parsers that make them from its commands' output:
`scontrol show job|node -o` text, `squeue --json`, `sacct --json` and sacct's delimited table,
every shape that differs between Slurm versions mapped in one place. Pure functions, tested
without a cluster; core/slurm.py runs the commands and hands their output here.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# States after which a job never changes again (base names, without flags such as "by 0").
FINAL_STATES = frozenset({
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
    "PREEMPTED", "TIMEOUT", "SPECIAL_EXIT", "REVOKED",
})


class SlurmError(RuntimeError):
    """A Slurm command is missing, failed, timed out, or said something we cannot parse."""


class JobNotFound(SlurmError):
    """Slurm does not know (or no longer remembers) this job."""


@dataclass(frozen=True)
class ExitCode:
    """Slurm's `exit:signal` pair (as in `sacct -o ExitCode` and `scontrol show job`)."""

    code: int = 0
    signal: int = 0

    @classmethod
    def parse(cls, text: str) -> ExitCode:
        m = re.fullmatch(r"\s*(\d+)(?::(\d+))?\s*", text or "")
        if not m:
            raise SlurmError(f"bad exit code {text!r}: expected 'exit:signal', e.g. '1:0'")
        return cls(int(m.group(1)), int(m.group(2) or 0))

    @classmethod
    def from_wait_status(cls, status: int) -> ExitCode:
        """From a raw wait(2) status (what squeue 22.05's JSON and SLURM_JOB_EXIT_CODE hold)."""
        if status & 0x7F:
            return cls(0, status & 0x7F)
        return cls((status >> 8) & 0xFF, 0)

    @property
    def ok(self) -> bool:
        return self.code == 0 and self.signal == 0

    def __str__(self) -> str:
        return f"{self.code}:{self.signal}"


@dataclass(frozen=True)
class StepState:
    """One step of a job as sacct reports it (`batch`, `extern`, `0`, `1`, ...)."""

    step: str
    state: str
    exit_code: ExitCode
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobState:
    """What Slurm says about one job, from whichever command was asked (`source`)."""

    job_id: int
    state: str                       # base state: RUNNING, COMPLETED, OUT_OF_MEMORY, ...
    exit_code: ExitCode = ExitCode()
    reason: str = "None"             # Slurm's Reason= (TimeLimit, NonZeroExitCode, ...)
    nodes: tuple[str, ...] = ()      # expanded node names
    nodelist: str = ""               # Slurm's compressed form, e.g. n[1-3]
    name: str = ""
    user: str = ""
    partition: str = ""
    derived_exit_code: ExitCode | None = None
    restarts: int = 0
    alloc_nodes: int = 0             # how many nodes Slurm allocated (0: unknown / none yet)
    # scontrol's FailedNode= (23.02+): the node whose failure ends or requeues the job. 24.11
    # says Reason=None while such a job is COMPLETING on its way back to the queue; 22.05
    # prints no FailedNode and says Reason=NodeDown.
    failed_node: str = ""
    steps: tuple[StepState, ...] = ()
    source: str = ""                 # scontrol | squeue | sacct
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


# ---------------------------------------------------------------------------------------------
# parsers (pure functions: unit-tested without a cluster)

# Keys of `scontrol show job` whose values are free text and may hold spaces and '=': inside
# them, only a key scontrol really prints (and has not printed yet) ends the value.
_FREE_TEXT_KEYS = frozenset({
    "JobName", "Command", "Comment", "AdminComment", "SystemComment", "WorkDir", "StdErr",
    "StdIn", "StdOut", "Extra", "Container", "ContainerID", "Features", "Reason",
})
_KNOWN_JOB_KEYS_TEXT = """
JobId ArrayJobId ArrayTaskId ArrayTaskThrottle HetJobId HetJobOffset HetJobIdSet JobName UserId
GroupId MCS_label Priority Nice Account QOS JobState Reason Dependency Requeue Restarts BatchFlag
Reboot ExitCode DerivedExitCode RunTime TimeLimit TimeMin SubmitTime EligibleTime AccrueTime
StartTime EndTime Deadline PreemptEligibleTime PreemptTime SuspendTime SecsPreSuspend
LastSchedEval Scheduler Partition AllocNode:Sid ReqNodeList ExcNodeList NodeList BatchHost
NumNodes NumCPUs NumTasks CPUs/Task ReqB:S:C:T TRES Socks/Node NtasksPerN:B:S:C CoreSpec
MinCPUsNode MinMemoryCPU MinMemoryNode MinTmpDiskNode Features DelayBoot OverSubscribe
Contiguous Licenses Network Command WorkDir AdminComment SystemComment Comment StdErr StdIn
StdOut Power TresPerNode TresPerJob TresPerTask TresPerSocket CpusPerTres MemPerTres
TresBind TresFreq MailUser MailType Prefer Extra Container ContainerID CPU_IDs Mem GRES
Nodes Switches Wait4Switch Reservation ResvPorts KillOInInvalidDependent Clusters
ClusterFeatures NtasksPerTRES CronJob CrontabSpec LicensesAlloc Segment SpreadJob
ReqNodeList Restarts OOMKillStep ResvName Epilog Prolog
BatchFeatures BurstBuffer BurstBufferState FedOrigin GresEnforceBind JOB_GRES ResizeTime
SELinuxContext ThreadSpec WCKey
FailedNode ReqTRES AllocTRES
GresAllowTaskSharing GresOneTaskPerSharing
CompletingTime StepMgrEnabled Nodes(COMPLETING) Nodes(DOWN)
SegmentSize
"""
# By version (src/api/job_info.c to 23.11, src/scontrol/info_job.c from 24.05): 22.05's keys,
# then 23.02's FailedNode (right after Reason=, which it would otherwise extend: a lost node's
# job read "Reason=NodeDown FailedNode=n2" on 24.11), ReqTRES/AllocTRES (TRES= before);
# 23.11's Gres*TaskSharing; 24.11's CompletingTime, StepMgrEnabled, Nodes(...); 25.05's
# SegmentSize.
_KNOWN_JOB_KEYS = frozenset(_KNOWN_JOB_KEYS_TEXT.split())
_KEY_AT = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_:/()+]*)=")


def parse_scontrol_record(line: str) -> dict[str, str]:
    """Parse one `scontrol show ... -o` line of `Key=Value` pairs into a dict.

    Values may contain spaces and '=' (Command=, Comment=, JobName=): a `Word=` inside such a
    value only starts a new pair when it is a key scontrol prints that this record has not had
    yet. Keys of newer Slurm versions still parse wherever they follow a simple value.
    """
    line = line.strip()
    if not line:
        return {}
    candidates = list(_KEY_AT.finditer(line))
    if not candidates or candidates[0].start() != 0:
        raise SlurmError(f"not a key=value record: {line[:80]!r}")
    out: dict[str, str] = {}
    cur = candidates[0]
    starts = [cur]
    for m in candidates[1:]:
        key, cur_key = m.group(1), cur.group(1)
        if key == cur_key or any(s.group(1) == key for s in starts):
            continue  # a key appears once per record: this one is part of a value
        if cur_key in _FREE_TEXT_KEYS and key not in _KNOWN_JOB_KEYS:
            continue
        starts.append(m)
        cur = m
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(line)
        out[m.group(1)] = line[m.end():end].strip()
    return out


def expand_hostlist(text: str) -> list[str]:
    """Expand Slurm's compressed node lists: 'n[1-3],gpu[01,05-06],login' -> names, in order."""
    text = (text or "").strip()
    if text in ("", "(null)", "None"):
        return []
    names: list[str] = []
    for part in _split_top_level(text):
        names.extend(_expand_one(part))
    return names


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise SlurmError(f"bad node list {text!r}: unbalanced ']'")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise SlurmError(f"bad node list {text!r}: unbalanced '['")
    parts.append("".join(cur))
    return [p for p in (p.strip() for p in parts) if p]


def _expand_one(part: str) -> list[str]:
    m = re.match(r"^([^\[]*)\[([^\]]+)\](.*)$", part)
    if not m:
        return [part]
    prefix, ranges, rest = m.groups()
    tails = _expand_one(rest) if rest else [""]
    out: list[str] = []
    for r in ranges.split(","):
        if "-" in r:
            lo, hi = r.split("-", 1)
            if not (lo.isdigit() and hi.isdigit()) or int(lo) > int(hi):
                raise SlurmError(f"bad node range {r!r} in {part!r}")
            width = len(lo)
            nums = [str(i).zfill(width) for i in range(int(lo), int(hi) + 1)]
        else:
            if not r.isdigit():
                raise SlurmError(f"bad node index {r!r} in {part!r}")
            nums = [r]
        out.extend(prefix + n + t for n in nums for t in tails)
    return out


def base_state(state: str) -> str:
    # "CANCELLED by 0" -> "CANCELLED"; flags like "RUNNING+..." are not printed by these tools.
    return (state or "").split()[0].upper() if state and state.strip() else "UNKNOWN"


def _int(value: Any, default: int = 0) -> int:
    """A plain number (scontrol's and sacct's text, 22.05's JSON) or 23.02+'s JSON number."""
    return json_number(value, default)


# ---------------------------------------------------------------------------------------------
# JSON of each Slurm version (`squeue --json`, `sacct --json`): every shape that differs between
# versions is mapped here, once, so the parsers below read one shape. From Slurm's source
# (src/plugins/openapi/*/ in 22.05, src/plugins/data_parser/v0.0.*/parsers.c after it) and
# real output (tests/data/slurm/*-22.05.*, *-24.11.*; capture.sh there made the 24.11 set):
#
#   field                22.05 (openapi v0.0.38)   23.02 (v0.0.39)          23.11+ (v0.0.40..43)
#   numbers              plain int                 {"set","infinite","number"}
#   job_state, state     "FAILED"                  "FAILED"                 ["FAILED", flags...]
#   squeue exit_code     wait status (int)         {"number": wait status}  process exit code
#   sacct/step exit_code {status, return_code: int|null, signal: {signal_id}} (22.05);
#                        {status: [..], return_code: {number}, signal: {id: {number}}} (later)
#   step id              {"id": "batch" | 0}       {"id": {"job_id", "step_id"}}  {"id": "7.batch"}
#   restart_cnt (sacct)  absent                    int


def json_number(value: Any, default: int = 0) -> int:
    """22.05's plain numbers; 23.02+'s {"set": bool, "infinite": bool, "number": N}."""
    if isinstance(value, dict):
        if value.get("infinite") or not value.get("set", True):
            return default
        value = value.get("number", default)
    if value is None or isinstance(value, bool):
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _json_state(value: Any) -> str:
    """A job or step state: 22.05/23.02 a string, 23.11+ a list (base state first, then flags);
    sacct's job state is under "current". Returns the base state name."""
    if isinstance(value, dict):
        value = value.get("current")
    if isinstance(value, list):
        value = value[0] if value else "UNKNOWN"
    return base_state(str(value) if value is not None else "UNKNOWN")


def _json_exit_code(value: Any) -> ExitCode:
    """An exit code in any version's JSON: a raw wait status (22.05's squeue: an int; 23.02's:
    a JSON number) or a process exit code {status, return_code, signal} (sacct in every
    version, squeue from 23.11), whose return_code is null/unset when a signal ended it."""
    if isinstance(value, bool) or value is None:
        return ExitCode()
    if isinstance(value, int):
        return ExitCode.from_wait_status(value)
    if not isinstance(value, dict):
        return ExitCode()
    if "number" in value and "return_code" not in value and "status" not in value:
        return ExitCode.from_wait_status(json_number(value))
    sig = value.get("signal") or {}
    signal = json_number(sig.get("signal_id", sig.get("id")) if isinstance(sig, dict) else 0)
    return ExitCode(json_number(value.get("return_code")), signal)


def _json_step_id(step: Mapping[str, Any]) -> str:
    """A step's name as sacct's table prints it (batch, extern, 0, 1, ...): 22.05 gives
    {"id": "batch"} or {"id": 0}; 23.02 {"id": {"job_id": 7, "step_id": "batch"}}; 23.11+
    {"id": "7.batch"} (the job id first)."""
    sid = step.get("step")
    if not isinstance(sid, dict):
        return str(sid if sid is not None else "?")
    value = sid.get("id", "?")
    if isinstance(value, dict):
        value = value.get("step_id", "?")
    text = str(value)
    job, dot, rest = text.partition(".")
    return rest if dot and job.isdigit() else text


def _json_nodes(value: Any) -> tuple[tuple[str, ...], str]:
    if isinstance(value, dict):  # step nodes: {"list": [...], "range": "n[1-3]"}
        lst = value.get("list") or expand_hostlist(value.get("range", ""))
        return tuple(lst), str(value.get("range", ",".join(lst)))
    text = str(value or "")
    return tuple(expand_hostlist(text)), text


def json_format(text_or_doc: str | Mapping[str, Any]) -> str:
    """Which JSON a Slurm command printed: "openapi/v0.0.38" (22.05), "data_parser/v0.0.42"
    (24.11), ...; "" when its meta block does not say."""
    doc = json.loads(text_or_doc) if isinstance(text_or_doc, str) else text_or_doc
    meta = doc.get("meta") or {}
    plugin = meta.get("plugin") or meta.get("plugins") or {}
    return str(plugin.get("data_parser") or plugin.get("type") or "")


def job_from_scontrol(record: Mapping[str, str], source: str = "scontrol") -> JobState:
    """A JobState from a job record in scontrol's keys (`record_from_json`)."""
    try:
        job_id = int(record["JobId"])
    except (KeyError, ValueError) as e:
        raise SlurmError(f"scontrol record without a valid JobId: {dict(record)!r:.200}") from e
    nodelist = record.get("NodeList", "")
    if nodelist == "(null)":
        nodelist = ""
    derived = record.get("DerivedExitCode")
    user = re.sub(r"\(\d+\)$", "", record.get("UserId", ""))
    return JobState(
        job_id=job_id,
        state=base_state(record.get("JobState", "")),
        exit_code=ExitCode.parse(record.get("ExitCode", "0:0")),
        reason=record.get("Reason", "None"),
        nodes=tuple(expand_hostlist(nodelist)),
        nodelist=nodelist,
        name=record.get("JobName", ""),
        user=user,
        partition=record.get("Partition", ""),
        derived_exit_code=ExitCode.parse(derived) if derived else None,
        restarts=_int(record.get("Restarts")),
        alloc_nodes=_int(record.get("NumNodes")) if nodelist else 0,
        failed_node=record.get("FailedNode", ""),
        source=source,
        raw=dict(record),
    )


def job_from_sacct_json(job: Mapping[str, Any]) -> JobState:
    """A JobState from one element of `sacct --json`'s "jobs" (any version: see above)."""
    state = job.get("state") or {}
    nodes, nodelist = _json_nodes(job.get("nodes"))
    steps = []
    for s in job.get("steps") or []:
        step_nodes, _ = _json_nodes(s.get("nodes"))
        steps.append(StepState(
            step=_json_step_id(s),
            state=_json_state(s.get("state")),
            exit_code=_json_exit_code(s.get("exit_code")),
            nodes=step_nodes,
        ))
    derived = job.get("derived_exit_code")
    return JobState(
        job_id=json_number(job.get("job_id")),
        state=_json_state(state),
        exit_code=_json_exit_code(job.get("exit_code")),
        reason=str(state.get("reason", "None")) if isinstance(state, dict) else "None",
        nodes=nodes,
        nodelist=nodelist,
        name=str(job.get("name", "")),
        user=str(job.get("user", "")),
        partition=str(job.get("partition", "")),
        derived_exit_code=_json_exit_code(derived) if derived is not None else None,
        restarts=json_number(job.get("restart_cnt")),
        alloc_nodes=json_number(job.get("allocation_nodes")) if nodelist else 0,
        steps=tuple(steps),
        source="sacct",
        raw=dict(job),
    )


def job_from_squeue_json(job: Mapping[str, Any]) -> JobState:
    """A JobState from one element of `squeue --json`'s "jobs" (any version: see above)."""
    nodes, nodelist = _json_nodes(job.get("nodes"))
    derived = job.get("derived_exit_code")
    return JobState(
        job_id=json_number(job.get("job_id")),
        state=_json_state(job.get("job_state")),
        exit_code=_json_exit_code(job.get("exit_code")),
        reason=str(job.get("state_reason", "None")),
        nodes=nodes,
        nodelist=nodelist,
        name=str(job.get("name", "")),
        user=str(job.get("user_name", "")),
        partition=str(job.get("partition", "")),
        derived_exit_code=_json_exit_code(derived) if derived is not None else None,
        restarts=json_number(job.get("restart_cnt")),
        alloc_nodes=json_number(job.get("node_count")) if nodelist else 0,
        source="squeue",
        raw=dict(job),
    )


def load_json(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise SlurmError(f"{what}: output is not JSON ({e}); first bytes: {text[:120]!r}") from e
    if not isinstance(data, dict):
        raise SlurmError(f"{what}: expected a JSON object, got {type(data).__name__}")
    # "Nothing found" (9003) is how sacct says "no such job (yet)": an empty answer, not a fault.
    errors = [e for e in data.get("errors") or []
              if e and not (isinstance(e, dict) and "Nothing found" in str(e.get("error", "")))]
    if errors and not data.get("jobs"):
        raise SlurmError(f"{what}: {errors}")
    return data


def parse_sacct_json(text: str) -> list[JobState]:
    return [job_from_sacct_json(j) for j in load_json(text, "sacct --json").get("jobs") or []]


SACCT_DELIM = "\x1f"  # ASCII unit separator: cannot occur in names or paths people type
# JobName last: it may hold anything.
SACCT_FIELDS = ("JobIDRaw", "State", "ExitCode", "DerivedExitCode", "NodeList", "AllocNodes",
                "Partition", "User", "Reason", "Submit", "JobName")


# What root reads from accounting: no free text. sacct prints a job name raw, newlines and
# the delimiter included, so a name 'x\n<its id>\x1fNODE_FAIL\x1f...' was a second row of
# the job's, the one read (third pass on issue 28); without JobName each line is one record.
ACCT_FIELDS = SACCT_FIELDS[:-1]


def parse_sacct_table(text: str, delimiter: str = SACCT_DELIM,
                      fields: tuple[str, ...] = SACCT_FIELDS) -> list[JobState]:
    """Parse `sacct -n -P --delimiter=D -o <fields>` (SACCT_FIELDS, or ACCT_FIELDS: those
    without JobName): one JobState per job, steps attached, in sacct's order."""
    jobs: list[dict[str, Any]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cols = line.split(delimiter, len(fields) - 1)
        if len(cols) != len(fields):
            raise SlurmError(f"sacct: expected {len(fields)} fields, got {len(cols)}: "
                             f"{line[:120]!r}")
        row = dict(zip(fields, cols, strict=True))
        job_part, dot, step = row["JobIDRaw"].partition(".")
        if not job_part.isdigit():
            raise SlurmError(f"sacct: bad JobIDRaw {row['JobIDRaw']!r}")
        if not dot:
            jobs.append({"row": row, "steps": []})
        elif jobs and jobs[-1]["row"]["JobIDRaw"] == job_part:
            jobs[-1]["steps"].append(StepState(
                step=step, state=base_state(row["State"]),
                exit_code=ExitCode.parse(row["ExitCode"] or "0:0"),
                nodes=tuple(expand_hostlist(row["NodeList"]))))
    out: list[JobState] = []
    for j in jobs:
        row = j["row"]
        nodelist = "" if row["NodeList"] in ("None assigned", "(null)") else row["NodeList"]
        out.append(JobState(
            job_id=int(row["JobIDRaw"]),
            state=base_state(row["State"]),
            exit_code=ExitCode.parse(row["ExitCode"] or "0:0"),
            reason=row["Reason"] or "None",
            nodes=tuple(expand_hostlist(nodelist)),
            nodelist=nodelist,
            name=row.get("JobName", ""),
            user=row["User"],
            partition=row["Partition"],
            derived_exit_code=ExitCode.parse(row["DerivedExitCode"])
            if row["DerivedExitCode"] else None,
            alloc_nodes=_int(row["AllocNodes"]),
            steps=tuple(j["steps"]),
            source="sacct",
            raw=row,
        ))
    return out


def parse_squeue_json(text: str) -> list[JobState]:
    return [job_from_squeue_json(j) for j in load_json(text, "squeue --json").get("jobs") or []]


def _local_iso(value: Any) -> str:
    """An epoch time in JSON as scontrol's text prints it (local, to the second)."""
    n = json_number(value)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(n)) if n > 0 else "Unknown"


def _json_job_state(value: Any) -> str:
    """As scontrol's text says it: COMPLETING while the flag is set (the job epilog runs then;
    its final state is inferred from Reason), else the base state."""
    flags = value if isinstance(value, list) else [value]
    return "COMPLETING" if "COMPLETING" in flags else _json_state(value)


def record_from_json(job: Mapping[str, Any]) -> dict[str, str]:
    """One job of Slurm's JSON (`scontrol show job --json`, `squeue --json`; any version: see
    the table above) as the record `scontrol show job -o` would print, key for key, built from
    typed fields: no value, whatever it holds, can become another field. Only the keys gpualert
    reads; MailUser is absent where the version's JSON lacks it (22.05: `mail_user`)."""
    ec, dec = _json_exit_code(job.get("exit_code")), job.get("derived_exit_code")
    uid = job.get("user_id")
    rec = {
        "JobId": str(json_number(job.get("job_id"))),
        "JobName": str(job.get("name") or ""),
        "UserId": f"{job.get('user_name') or ''}({json_number(uid, -1)})"
        if uid is not None else str(job.get("user_name") or ""),
        "Account": str(job.get("account") or ""),
        "Partition": str(job.get("partition") or ""),
        "JobState": _json_job_state(job.get("job_state")),
        "Reason": str(job.get("state_reason") or "None"),
        "Restarts": str(json_number(job.get("restart_cnt"))),
        "ExitCode": f"{ec.code}:{ec.signal}",
        "SubmitTime": _local_iso(job.get("submit_time")),
        "StartTime": _local_iso(job.get("start_time")),
        "EndTime": _local_iso(job.get("end_time")),
        "NodeList": str(job.get("nodes") or "") or "(null)",
        "NumNodes": str(json_number(job.get("node_count"))),
        "BatchHost": str(job.get("batch_host") or ""),
        "ExcNodeList": str(job.get("excluded_nodes") or "") or "(null)",
        "WorkDir": str(job.get("current_working_directory") or ""),
        "Comment": str(job.get("comment") or ""),
        # 25.05+ give the path slurmstepd opened; before, the pattern (slurm-%j.out)
        "StdOut": str(job.get("stdout_expanded") or job.get("standard_output") or ""),
    }
    if dec is not None:
        d = _json_exit_code(dec)
        rec["DerivedExitCode"] = f"{d.code}:{d.signal}"
    if job.get("failed_node"):
        rec["FailedNode"] = str(job["failed_node"])
    if job.get("mail_user") is not None:
        rec["MailUser"] = str(job["mail_user"])
    array_job = json_number(job.get("array_job_id"))
    if array_job:
        rec["ArrayJobId"] = str(array_job)
        task = json_number(job.get("array_task_id"), -1)
        if task >= 0:
            rec["ArrayTaskId"] = str(task)
    return rec


@dataclass(frozen=True)
class NodeInfo:
    """One node as `scontrol show node` reports it."""

    name: str
    state: str  # Slurm's State= with its flags, e.g. IDLE+DRAIN, DOWN+NOT_RESPONDING
    reason: str = ""  # Reason= without the trailing " [user@time]"; "" when none
    partitions: tuple[str, ...] = ()

    @property
    def flags(self) -> frozenset[str]:
        return frozenset(self.state.upper().replace("*", "").split("+"))

    @property
    def drained(self) -> bool:
        """Drained or draining (DRAIN flag): someone asked for no new jobs there."""
        return "DRAIN" in self.flags


def parse_node_record(record: Mapping[str, str]) -> NodeInfo:
    if not record.get("NodeName"):
        raise SlurmError(f"scontrol node record without NodeName: {dict(record)!r:.200}")
    reason = record.get("Reason", "")
    reason = "" if reason in ("(null)", "None") else re.sub(r"\s*\[[^\]]*@[^\]]*\]$", "", reason)
    parts = record.get("Partitions", "")
    return NodeInfo(name=record["NodeName"], state=record.get("State", "UNKNOWN"),
                    reason=reason.strip(),
                    partitions=tuple(p for p in parts.split(",") if p and p != "(null)"))


def parse_time(text: str | None) -> float | None:
    """scontrol's local 'YYYY-MM-DDTHH:MM:SS' as epoch seconds; None for Unknown/None."""
    if not text or text in ("Unknown", "None", "(null)"):
        return None
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None
