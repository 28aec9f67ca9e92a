"""What only root on a node can see about a job: kernel log lines in the job's time window (NVRM
Xid, ECC, oom-kill) and NVML counters before/after. No kernel log access, no GPU, no driver and
no NVML library are normal cases: each is recorded as absent with the reason, never raised."""

from __future__ import annotations

import re
import shutil
import subprocess
from datetime import datetime
from typing import Any

# Kernel lines that matter for a GPU job; everything else in the ring buffer is left out.
KERNEL_RE = re.compile(
    r"NVRM: Xid|NVRM:.*(?:ECC|fallen off the bus|GPU has fallen)|\bXid\b.*\bpid=|"
    r"oom-kill|Out of memory|Memory cgroup out of memory|Killed process|invoked oom-killer|"
    r"\bECC\b.*(?:error|uncorrectable)|mce: \[Hardware Error\]",
    re.IGNORECASE,
)
MAX_KERNEL_LINES = 200
_ISO_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:[,.](\d+))?([+-]\d\d:?\d\d)?\s+(.*)$")


def parse_iso_line(line: str) -> tuple[float | None, str]:
    """'2026-11-30T06:20:11,123456+00:00 text' (dmesg --time-format iso, journalctl -o
    short-iso-precise) -> (epoch or None, text)."""
    # not line.strip(): a line that begins with white space is the rest of a record whose
    # text held a newline (a file name in a trap line), never a record with a stamp of its own
    m = _ISO_RE.match(line.rstrip())
    if not m:
        return None, line.rstrip("\n")
    stamp, frac, tz, text = m.groups()
    try:
        dt = datetime.fromisoformat(stamp + (tz or "+00:00"))
    except ValueError:
        return None, text
    return dt.timestamp() + (float(f"0.{frac}") if frac else 0.0), text


def join_continuations(lines: list[str]) -> list[str]:
    """One line per kernel record. dmesg and journalctl print a newline inside a record's text
    raw, then indent what follows; a user's file name in a trap line can hold one, and with a
    time stamp after it the rest read as a record of its own ('NVRM: Xid ...' at a time the
    user chose). An indented line is joined to the record before it, the newline as \\x0a."""
    out: list[str] = []
    for line in lines:
        line = line.rstrip("\n")
        if out and line[:1].isspace():
            out[-1] += "\\x0a" + line.lstrip()
        else:
            out.append(line)
    return out


def filter_kernel_lines(lines: list[str], start: float | None, end: float | None,
                        slack_s: float = 2.0) -> list[str]:
    """The lines that match KERNEL_RE and fall in [start - slack, end + slack] (a line without
    a time stamp is kept: better one extra line than a lost Xid). At most MAX_KERNEL_LINES,
    the first ones (the first fault is the cause). A line holding the driver's words that is
    not the driver's own message is dropped: the words came from a process or file name a
    user chose (kernel_lines.kernel_line_kept, docs/SECURITY.md)."""
    from gpualert_slurm.core.kernel_lines import kernel_line_kept

    out = []
    for line in join_continuations(lines):
        t, text = parse_iso_line(line)
        if not KERNEL_RE.search(text) or not kernel_line_kept(text):
            continue
        if t is not None and ((start is not None and t < start - slack_s)
                              or (end is not None and t > end + slack_s)):
            continue
        out.append(line.rstrip("\n"))
        if len(out) >= MAX_KERNEL_LINES:
            break
    return out


# An OOM kill names the memory cgroup it happened in, which Slurm names after the job: v1
# /slurm[_<node>]/uid_<u>/job_<id>/..., v2 /system.slice/slurmstepd.scope/job_<id>/..., 26.05
# job_<SLUID>. The event's other lines carry the killed task's pid.
_MEMCG_JOB = re.compile(r"\b(?:oom_memcg|task_memcg)=[^,\s]*?/job_([A-Za-z0-9]+)(?=[/,\s]|$)")
_EVENT_PID = re.compile(r"[,\s]pid=(\d+)\b")
_KILLED_PID = re.compile(r"\bKilled process (\d+)\b")
_INVOKED = re.compile(r"invoked oom-killer")


def bind_to_job(lines: list[str], job_ids: set[str]) -> tuple[list[str], list[str], set[str]]:
    """(lines kept, lines left out, the other jobs named): an OOM kill whose memory cgroup is
    another job's is no evidence for this one, nor are the lines of that event (the
    'invoked oom-killer' before it, 'Killed process <its pid>'). On a node shared by several
    jobs, a SIGKILLed job was judged host_oom from its neighbour's kill (issue 32). Lines
    that name no job are kept."""
    texts = [parse_iso_line(ln)[1] for ln in lines]
    drop: set[int] = set()
    others: set[str] = set()
    pids: set[str] = set()
    for i, t in enumerate(texts):
        jobs = set(_MEMCG_JOB.findall(t))
        if not jobs or jobs & job_ids:
            continue
        drop.add(i)
        others |= jobs
        pids |= set(_EVENT_PID.findall(t))
        for j in range(i - 1, -1, -1):  # the event's first line, just before
            if _INVOKED.search(texts[j]):
                drop.add(j)
                break
            if _MEMCG_JOB.search(texts[j]):
                break
    for i, t in enumerate(texts):
        m = _KILLED_PID.search(t)
        if m and m.group(1) in pids:
            drop.add(i)
    return ([ln for i, ln in enumerate(lines) if i not in drop],
            [lines[i] for i in sorted(drop)], others)


def run_tool(argv: list[str], timeout: float) -> tuple[str | None, str]:
    """A root tool's stdout, or None and why not (not installed, no answer, failed)."""
    exe = shutil.which(argv[0])
    if exe is None:
        return None, f"{argv[0]}: not installed"
    try:
        p = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, errors="replace",
                           timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, f"{argv[0]}: no answer within {timeout:g} s"
    except OSError as e:
        return None, f"{argv[0]}: {e}"
    if p.returncode != 0:
        return None, f"{argv[0]}: exit {p.returncode}: {(p.stderr or '').strip()[:200]}"
    return p.stdout, ""


def kernel_evidence(start: float | None, end: float | None, timeout: float = 5.0,
                    job_ids: set[str] | None = None) -> dict[str, Any]:
    """{"source": "dmesg"|"journalctl"|None, "lines": [...], "absent": reason|None}. `start`
    is the run's start (this node's Prolog, else Slurm): without it no line is read (lines
    since boot would be other jobs' and other users'). job_ids (the job's id and SLUID): lines
    naming another job's cgroup are left out, counted under "other_jobs" (bind_to_job)."""
    if start is None:
        return {"source": None, "lines": [],
                "absent": "the job's start time from Slurm is not known: no kernel lines read"}
    reasons = []
    for argv in (["dmesg", "--time-format", "iso", "--nopager"],
                 ["journalctl", "-k", "-q", "--no-pager", "-o", "short-iso-precise",
                  *(["--since", f"@{int(start) - 5}"] if start else [])]):
        text, why = run_tool(argv, timeout)
        if text is None:
            reasons.append(why)
            continue
        lines = filter_kernel_lines(text.splitlines(), start, end)
        out: dict[str, Any] = {"source": argv[0], "absent": None, "lines": lines}
        if job_ids:
            out["lines"], dropped, others = bind_to_job(lines, job_ids)
            if dropped:
                out["other_jobs"] = {"jobs": sorted(others)[:10], "lines": len(dropped)}
        return out
    return {"source": None, "lines": [], "absent": "; ".join(reasons)}


def nvml_evidence(before: Any) -> dict[str, Any]:
    """NVML now, beside the Prolog's snapshot; `changed` lists the error counters that moved.
    Absent GPU/driver/library: {"absent": reason}."""
    from gpualert_slurm.core.gpu import gpu_snapshot

    after = gpu_snapshot()
    out: dict[str, Any] = {"before": before, "after": after, "changed": [], "absent": None}
    if isinstance(after, str):
        out["absent"] = after
        return out
    if isinstance(before, dict):
        old = {d.get("uuid"): d for d in before.get("devices", []) if isinstance(d, dict)}
        for dev in after.get("devices", []):
            prev = old.get(dev.get("uuid"))
            if not prev:
                continue
            for key in ("ecc_uncorrected_volatile", "retired_pages_pending",
                        "remapped_rows_uncorrected", "remapped_rows_pending",
                        "remapped_rows_failure"):
                a, b = prev.get(key), dev.get(key)
                if isinstance(a, int | bool) and isinstance(b, int | bool) and a != b:
                    out["changed"].append(
                        {"gpu": dev.get("index"), "uuid": dev.get("uuid"), "counter": key,
                         "before": a, "after": b})
    return out
