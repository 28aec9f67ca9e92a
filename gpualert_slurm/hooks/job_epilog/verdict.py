"""The job's verdict (<attempt dir>/verdict.json): the classifier's answer for all ranks
together, with the nodes' evidence that checked, Slurm's facts, the job's record and the notes
the report shows. Built as a core.verdict.VerdictRecord and written through
core.verdict.write_at (the one writer; a verdict of the wrong shape is refused there, not
written). Between the writes the epilog adds report, artifacts and recovery to its JSON form,
which the report and recovery read. Also the least verdict, when gpualert itself failed."""

from __future__ import annotations

import json
import os
from contextlib import suppress
from typing import Any

from gpualert_slurm.core.verdict import (
    VERSION,
    ArrayRef,
    Cause,
    JobInfo,
    VerdictError,
    VerdictRecord,
    write_at,
)
from gpualert_slurm.hooks.classify_child import PendingVerdict, classify_tasks
from gpualert_slurm.hooks.job_epilog.context import JobEpilog
from gpualert_slurm.hooks.job_epilog.facts import (
    classify_facts,
    log_gap_notes,
    run_times,
    sealed_view,
    trusted_facts,
)
from gpualert_slurm.hooks.jobspool import TaskLog, exit_code2

# what later steps add (send_job, recover): absent from verdict.json until they do
LATER = frozenset({"report", "artifacts", "recovery", "decision_id"})


def build_verdict(ctx: JobEpilog, node_recs: dict[str, Any], nodes: list[str],
                  sf: dict[str, Any], now: float, classify_s: float = 60.0,
                  early: PendingVerdict | None = None) -> dict[str, Any]:
    from gpualert_slurm.core import provenance

    js, env, tasks = ctx.spool, ctx.env, ctx.tasks
    rec = sf.get("record") or {}
    trusted = trusted_facts(ctx, node_recs, sf, now)
    kernel, nvml, notes = node_evidence(nodes, node_recs, trusted)
    verdict, err = judge(ctx, sf, kernel, nvml, now, classify_s, early)
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
    return VerdictRecord(
        job_id=env["SLURM_JOB_ID"],
        attempt=js.attempt,
        attempt_path=js.attempt_path,
        logs_dir=os.path.join(js.attempt_path, "tasks"),
        array=ArrayRef(job_id=array_id, task_id=task_id)
        if array_id and task_id not in (None, "", "N/A") else None,
        job=JobInfo(**job_section(ctx, rec, nodes, sf, now)),
        options=ctx.opts.to_json(),
        failed=failed,
        silent_failure=silent,
        cause=Cause.from_json(verdict),
        classifier_error=err,
        tasks=tuple(t.info() for t in tasks),
        nodes={n: _node_summary(sealed_view(node_recs[n], (trusted["nodes"].get(n) or {})
                                           .get("verified"))
                               if isinstance(node_recs.get(n), dict) else None)
               for n in nodes},
        trusted=trusted,
        last_lines=last_lines(failing) if failing is not None else None,
        notes=tuple(notes),
        time=now,
        omitted=LATER,
    ).to_json()


def node_evidence(nodes: list[str], node_recs: dict[str, Any], trusted: dict[str, Any]
                  ) -> tuple[list[str], dict[str, Any], list[str]]:
    """(kernel lines as '<node>: <line>', node -> NVML, notes) from the nodes' records, each
    cut to what its seal covers where it checked (facts.sealed_view)."""
    kernel: list[str] = []
    nvml: dict[str, Any] = {}
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
        other = k.get("other_jobs")
        if isinstance(other, dict) and other.get("lines"):
            jobs = ", ".join(str(j) for j in (other.get("jobs") or [])[:5])
            notes.append(f"node {n}: {other['lines']} kernel line(s) in the job's window name "
                         f"another job's memory cgroup (job {jobs}): no evidence for this one")
        nvml[n] = r.get("nvml")
        if (r.get("nvml") or {}).get("changed"):
            notes.append(f"node {n}: GPU error counters changed during the job: "
                         f"{r['nvml']['changed']}")
    return kernel, nvml, notes


def judge(ctx: JobEpilog, sf: dict[str, Any], kernel: list[str], nvml: dict[str, Any],
          now: float, classify_s: float, early: PendingVerdict | None
          ) -> tuple[dict[str, Any], str | None]:
    """The early classification (started before the nodes' evidence came), or a new one
    when that evidence brings kernel lines or moved GPU counters, which it must see."""
    if kernel or any((x or {}).get("changed") for x in nvml.values()) or early is None:
        if early is not None:
            early.cancel()
        return classify_tasks(ctx.tasks, classify_facts(ctx, sf, nvml, now), kernel,
                              timeout_s=classify_s, slurm_output=ctx.slurm_output)
    return early.result(classify_s)


def job_section(ctx: JobEpilog, rec: dict[str, Any], nodes: list[str], sf: dict[str, Any],
                now: float) -> dict[str, Any]:
    """verdict.json's "job": Slurm's record first, then this hook's environment, then
    job.json (the user's)."""
    env, job = ctx.env, ctx.spool.job
    gpus: dict[str, Any] = {}
    for n in nodes:
        with suppress(Exception):
            gpus[n] = (job.get("gpus") or {}).get(n)
    start, end = run_times(sf, now)
    start = start or job.get("start_time")
    return {
        "name": rec.get("JobName") or env.get("SLURM_JOB_NAME"),
        "user": env.get("SLURM_JOB_USER") or job.get("user"),
        "uid": ctx.spool.uid,
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
    }


def fallback_verdict(ctx: JobEpilog, err: Exception) -> dict[str, Any]:
    """The least verdict: Slurm's exit code, the logs, and what went wrong in gpualert."""
    env, js = ctx.env, ctx.spool
    code, sig = exit_code2(env)
    return {"version": VERSION, "job_id": env["SLURM_JOB_ID"], "attempt": js.attempt,
            "attempt_path": js.attempt_path, "logs_dir": os.path.join(js.attempt_path, "tasks"),
            "job": {"name": env.get("SLURM_JOB_NAME"), "user": env.get("SLURM_JOB_USER"),
                    "nodelist": env.get("SLURM_JOB_NODELIST"), "exit_code": code,
                    "signal": sig, "work_dir": env.get("SLURM_JOB_WORK_DIR")},
            "failed": bool(code or sig), "silent_failure": False,
            "verdict": {"class": "unknown", "domain": "unknown", "confidence": 0.0,
                        "hint": "gpualert could not analyse this job; its logs are complete.",
                        "detail": f"gpualert error: {type(err).__name__}: {err}"},
            "tasks": [], "notes": [f"gpualert error while writing this report: {err!r}"]}


def save_verdict(ctx: JobEpilog, v: dict[str, Any]) -> bool:
    """verdict.json, atomically, through core.verdict (the one writer); a full or broken spool
    is logged, and the report still goes out (the mail carries the same content)."""
    js = ctx.spool
    try:
        write_at(js.attempt_fd, VerdictRecord.of(v))
        return True
    except (OSError, VerdictError) as e:
        ctx.log.error(f"job {v.get('job_id')}: cannot write verdict.json in {js.attempt_path}: "
                      f"{e}")
        return False


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




def _node_summary(rec: Any) -> dict[str, Any]:
    """What verdict.json keeps of a node's record (which may still be at its evidence stage,
    without the node's own verdict)."""
    if not isinstance(rec, dict):
        return {"verdict": None, "kernel": None}
    return {"verdict": (rec.get("verdict") or {}).get("class"), "kernel": rec.get("kernel"),
            "stage": rec.get("stage"), "error": rec.get("error")}


def dump(v: dict[str, Any]) -> str:
    return json.dumps(v, indent=1, sort_keys=True)
