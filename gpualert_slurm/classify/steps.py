"""The decision steps: each looks at one kind of evidence in a job (_Ctx) and gives a Draft,
or None when its evidence is not there. STEPS names every step; precedence.yaml says in which
order they are asked (the first that gives a verdict decides), so changing the order edits
that one list and adding a step is a function here, a row of STEPS and a row of the file.

A step decides only from the evidence; what it says is made by _Ctx.make/app_verdict.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from gpualert_slurm.classify import precedence
from gpualert_slurm.classify.context import _Ctx
from gpualert_slurm.classify.endings import (
    _CLOCK,
    CUT_TAIL,
    STOP_RULE,
    _abandoned,
    _handled_run,
    _heartbeat_tail,
    _lines_after,
    _log_silence,
    _log_tails,
    _stops_in_nccl_setup,
    _stuck_after_setup,
    _went_on,
    _where_it_stops,
)
from gpualert_slurm.classify.locate import (
    _batch_host_lost,
    _cascades,
    _finding_of,
    _launcher_root,
    _log_straggler,
    _lost_node,
    _task_of,
)
from gpualert_slurm.classify.model import MAX_EVIDENCE, Draft, _ev, _Finding
from gpualert_slurm.classify.scan import Event

LIMIT_GAP = 50  # lines from a cause to Slurm's time-limit line: the job had failed before it
SILENT_TAIL = 50  # silent failure evidence within this many lines of a log's end decides
LAUNCHER_FRAME = "launcher_frame"  # rules/*.yaml: a frame of torchrun's / DeepSpeed's own traceback
# rules/*.yaml: a launcher passing SIGINT on (torchrun's "Received 2 death signal", srun's
# "sending Ctrl-C to"): a traceback that starts within INTERRUPT_GAP lines after one is the
# interrupt's (its KeyboardInterrupt line is what a cut log lost)
INTERRUPT_NOTICE = ("elastic_got_sigint", "srun_sent_ctrl_c")
INTERRUPT_GAP = 20
_TB_MARKERS = ("traceback_frame", "traceback_header", LAUNCHER_FRAME)


def _nvml_hardware(nvml: dict | None) -> str | None:
    """An uncorrectable-ECC / retired-page counter that grew during the job."""
    if not isinstance(nvml, dict):
        return None
    before, after = nvml.get("before") or {}, nvml.get("after") or {}

    def flat(d: Any, prefix: str = "") -> dict[str, float]:
        out: dict[str, float] = {}
        if isinstance(d, dict):
            for k, v in d.items():
                out.update(flat(v, f"{prefix}{k}."))
        elif isinstance(d, list):
            for i, v in enumerate(d):
                out.update(flat(v, f"{prefix}{i}."))
        elif isinstance(d, (int, float)) and not isinstance(d, bool):
            out[prefix.rstrip(".")] = float(d)
        return out

    b, a = flat(before), flat(after)
    for k, v in a.items():
        lk = k.lower()
        if ("uncorrect" in lk or "retired" in lk or "xid" in lk or "remap" in lk) and v > b.get(
            k, 0.0
        ):
            return f"NVML counter {k} rose from {b.get(k, 0):g} to {v:g} during the job"
    return None


# ---- the decision steps; their order is precedence.yaml ----

def _step_hardware(c: _Ctx) -> Draft | None:
    # a kernel log's fault counts always; the same line in a task log when the job failed
    hw = [e for e in c.kevents + ([] if c.clean else c.all_events)
          if e.cls == "gpu_hardware" and e.role == "root"]
    nv = _nvml_hardware(c.job.nvml)
    if not (hw or nv):
        return None
    ev = [_ev(e) for e in hw[:4]]
    if nv:
        ev.append({"file": "(nvml)", "line": None, "text": nv})
    return c.make("gpu_hardware", 0.9, hw[0].text[:200] if hw else nv or "", ev, c.root)


def _step_node_failure(c: _Ctx) -> Draft | None:
    if c.state_cls != "node_failure":
        return None
    what = c.sched_event.text[:200] if c.sched_event else f"Slurm state {c.state or 'NODE_FAIL'}"
    v = c.make("node_failure", 0.9, what, c.state_ev)
    node, lost = _lost_node(c.all_events + c.kevents, c.tasks)
    if node is None:
        return _batch_host_lost(c.tasks, v)
    # the lost node is the root, not a surviving rank that srun killed after it
    v.root_node = node
    if not lost:
        if v.root_rank is not None and (t := _task_of(c.tasks, v.root_rank)) is not None \
                and t.node not in (None, node):
            v.root_rank = v.root_step = None
        return v
    v.root_rank, v.root_step = lost[0].rank, lost[0].step
    names = ", ".join(f"{t.rank}" + (f" (step {t.step})" if t.step != lost[0].step else "")
                      for t in lost)
    v.detail += (f"; rank{'s' if len(lost) > 1 else ''} {names} ran on {node} and left no "
                 "exit record: lost with the node")
    v.evidence = (v.evidence + [{"file": "(task records)", "line": None,
                                 "text": f"rank {t.rank} (step {t.step}) " + (
                                     f"started on {node}, no exit record" if t.node else
                                     "left no start or exit record")} for t in lost[:3]]
                  )[:MAX_EVIDENCE]
    return v


def _scheduler_ended(e: Event) -> bool:
    """The line that ended the job is the scheduler's own (Slurm's "CANCELLED AT ... DUE TO
    TIME LIMIT" / "DUE to SIGNAL Terminated", a time limit or cancel another scheduler states):
    with no heartbeat, a hang is only inferred from the log, and the scheduler's word outranks
    that inference (issue 32)."""
    return e.cls in ("time_limit", "cancelled")


def _step_hang(c: _Ctx) -> Draft | None:
    j = c.job
    if j.silence_s is None and not c.clean and not c.crashed:
        stuck = _stuck_after_setup(c)
        if stuck is not None and not _scheduler_ended(stuck[1]):
            setup, end = stuck
            return c.make("hang", 0.5, f"the log stops right after a collective was set up "
                          f"({setup.text[:120]!r}, line {setup.line}), then {end.text[:120]!r}: "
                          "no output between, the job hung in the collective and was ended "
                          "(evidence: the log's last lines, no heartbeat)",
                          [_ev(setup), _ev(end)], _finding_of(c.findings, setup))
        quiet = _log_silence(c)
        if quiet is not None and not _scheduler_ended(quiet[2]) \
                and not (c.root is not None and _failed_before_limit(c)):
            gap, last, lim = quiet
            return c.make("hang", 0.6, f"the log's last timed line came {gap / 3600:.1f} h "
                          f"before the line that ended the job ({last[:100]!r}); silent that "
                          f"long, the job hung and {lim.text[:100]!r} ended it (evidence: the "
                          "log's own timestamps, no heartbeat)",
                          [{"file": lim.file, "line": None, "text": last[:300]}, _ev(lim)])
    if (c.clean or j.hang_threshold_s is None or j.silence_s is None
            or j.silence_s <= j.hang_threshold_s or c.crashed):
        return None
    return c.make("hang", 0.8, f"no output for {j.silence_s:.0f} s "
                  f"(threshold {j.hang_threshold_s:.0f} s; evidence: the tap's heartbeat, each "
                  "task's last output)",
                  [{"file": "(heartbeat)", "line": None,
                    "text": f"silent for {j.silence_s:.0f} s before the job ended"}]
                  + c.state_ev)


def _step_preempted(c: _Ctx) -> Draft | None:
    if c.state_cls != "preempted":
        return None
    # a log line (Slurm's, a launcher's, a cloud's or Ray's) says who preempted it
    what = c.sched_event.text[:200] if c.sched_event else "preempted by Slurm"
    return c.make("preempted", 0.95, what, c.state_ev)


def _failed_before_limit(c: _Ctx) -> bool:
    """The root rank failed by itself before Slurm ended the job: its exit record says so, or
    its log ends in the cause shortly before Slurm's line in the same log."""
    if c.root is None:
        return False
    if c.crashed:
        return True
    inc = c.root.incident
    if inc is None or _WARNING_LEVEL.search(inc.text[:200]):
        return False  # (a logger's warning is no failure of the rank: Slurm's line decides)
    # Slurm's line in the same file (a labelled batch log keeps it apart from the rank's lines)
    lim = [e for e in c.all_events if e.file == inc.file and e.cls == c.state_cls
           and e.role == "root" and e.order > inc.order]
    return bool(lim) and lim[0].order - inc.order <= LIMIT_GAP and not _went_on(inc, lim[0])


def _step_time_limit_or_cancel(c: _Ctx) -> Draft | None:
    if c.state_cls not in ("time_limit", "cancelled"):
        return None
    if c.state_cls == "cancelled" and _memory_verdicts(c):
        return None  # Slurm said why it killed the job (host_oom_state)
    if c.root is not None and _failed_before_limit(c):
        return c.app_verdict(c.root, 0.75, f"(then {c.state_cls.replace('_', ' ')}) ")
    lim = c.sched_event
    if c.state_cls == "cancelled" and lim is not None:
        # f10k-: a peer lost (NCCL's) before Slurm's CANCELLED line: a multi-node launcher shut
        # the job down after a rank died; that failure started it, not the cancel
        lost = [e for e in c.all_events if e.file == lim.file and e.role == "cascade"
                and e.order < lim.order and e.cls in ("nccl_error", "collective_timeout")]
        if lost:
            return c.make(lost[0].cls, 0.5, f"(then cancelled) a peer was lost before Slurm's "
                          f"CANCELLED line: {lost[0].text[:160]}", [_ev(lost[0]), _ev(lim)],
                          _finding_of(c.findings, lost[0]))
    return c.make(c.state_cls, 0.9,
                  f"Slurm state {c.state}" if c.state else c.state_ev[0]["text"], c.state_ev)


def _memory_verdicts(c: _Ctx) -> list[Event]:
    """Slurm's (or a container manager's) own lines saying it killed the job for memory
    (precedence.yaml host_oom_state `verdicts`), when no Slurm state says otherwise."""
    if c.clean or c.state_cls not in (None, "cancelled"):
        return []
    ids = set(c.prec.verdicts.get("host_oom_state", frozenset()))
    inc = c.root.incident if c.root is not None else None
    if inc is None or _WARNING_LEVEL.search(inc.text[:200]):
        ids |= c.prec.verdicts.get("host_oom_state:verdicts_over_warnings", frozenset())
    return [e for e in c.kevents + c.all_events if e.rule.id in ids]


# a line a logger printed at warning level: glog's "W0304 05:06:07" / TensorFlow's "...: W
# path.cc:282]", torch's "[W ...]", "WARNING" / "Warning:" (not how a program ends)
_WARNING_LEVEL = re.compile(r"(?:^|[\s:\]])(?:W\d{4} \d|W(?= \S+\.(?:cc|cpp|h|py):\d+\])|\[W |"
                            r"WARN(?:ING)?\b|[Ww]arning:)")


def _step_host_oom_state(c: _Ctx) -> Draft | None:
    said = _memory_verdicts(c) if c.state_cls != "host_oom" else []
    if said:
        then = (f"; then {c.state_ev[0]['text'][:120]}" if c.state_cls == "cancelled"
                and c.state_ev else "")
        ev = [_ev(e) for e in said[:2]] + [_ev(e) for e in c.all_events + c.kevents
                                            if e.cls == "host_oom" and e not in said][:2]
        r = c.root
        return c.make("host_oom", 0.9, f"{said[0].text[:200]} (the scheduler's own verdict on "
                      f"why it killed the job{then})", ev + c.state_ev[:1],
                      r if r and r.incident and r.incident.cls == "host_oom"
                      else _finding_of(c.findings, said[0]))
    if c.state_cls != "host_oom":
        return None
    ev = [_ev(e) for e in c.all_events + c.kevents if e.cls == "host_oom"][:4]
    r = c.root
    return c.make("host_oom", 0.9, "Slurm state OUT_OF_MEMORY", c.state_ev + ev,
                  r if r and r.incident and r.incident.cls == "host_oom" else None)


def _step_silent_failure(c: _Ctx) -> Draft | None:
    if not c.clean:
        return None
    for f in sorted(c.findings, key=_Finding.key):
        if f.scan is None or _was_recovered(c, f):
            continue
        silent = [e for e in f.events if e.rule.silent and e.role == "root"]
        if silent and silent[-1].order >= f.scan.segments - SILENT_TAIL:
            first = next(e for e in silent if e.cls == silent[-1].cls)
            v = c.app_verdict(f, 0.75, "the job exited 0, but: ", first)
            if silent[-1] is not first:
                v.evidence = (v.evidence + [_ev(silent[-1])])[:MAX_EVIDENCE]
            v.silent_failure = True
            return v
        run = _handled_run(f.events, f.scan)
        if run:
            v = c.app_verdict(f, 0.6, "the job exited 0, but it skipped steps from line "
                              f"{run[0].line} to its end: ", run[0])
            v.evidence = (v.evidence + [_ev(run[-1])])[:MAX_EVIDENCE]
            v.silent_failure = True
            return v
    return None


def _step_abandoned(c: _Ctx) -> Draft | None:
    if not c.clean:
        return None
    for f in sorted(c.findings, key=_Finding.key):
        hit = _abandoned(f.events, f.scan) if f.scan is not None and not _was_recovered(
            c, f) else None
        if hit is None:
            continue
        inc, mark = hit
        v = c.app_verdict(f, 0.7, "the job exited 0, but: ", inc)
        v.evidence = ([_ev(mark)] + [e for e in v.evidence if e != _ev(mark)])[:MAX_EVIDENCE]
        v.detail += f" (after {mark.text[:120]!r}: the work ended there)"
        v.silent_failure = True
        return v
    return None


def _was_recovered(c: _Ctx, f: _Finding) -> bool:
    """A failed step's own log in a job that went on after it: not where the job ended."""
    return not f.from_batch and any(f.task is t for t in c.recovered)


def _step_clean_exit(c: _Ctx) -> Draft | None:
    if not c.clean:
        return None
    if c.recovered:
        t = c.recovered[0]
        how = f"signal {t.signal}" if t.signal else f"exit code {t.exit_code}"
        return c.make("success", 0.8, f"job {c.state or 'ended'} with exit code 0; step "
                      f"{t.step} had failed ({how}) and a later step ended well: the script "
                      "recovered", [{"file": "(task records)", "line": None,
                                     "text": f"step {t.step} rank {t.rank}: {how}"}])
    if c.root is not None and c.root.incident is not None:
        return c.make("success", 0.6, "exit code 0 (the log shows "
                      f"{c.root.incident.cls} evidence that the job survived)", [])
    return c.make("success", 0.95, "exit code 0, no failure evidence", [])


def _step_worker_oom(c: _Ctx) -> Draft | None:
    """The first cause is a worker that vanished and the OOM killer's report is anywhere:
    host_oom, the worker's death its symptom (precedence.yaml lists the symptom rules)."""
    if c.clean:
        return None
    symptoms = c.prec.symptoms.get("worker_oom", frozenset())
    r = c.root
    lost = [r.incident] if r is not None and r.incident is not None else []
    if not lost:  # no cause in the logs: a symptom that only confirms (torchrun's exitcode -9)
        lost = [e for e in c.confirmations if e.rule.id in symptoms][:1]
    if not lost or lost[0].rule.id not in symptoms:
        return None
    oom = [e for e in c.kevents + c.all_events
           if e.cls == "host_oom" and e.role in ("root", "confirmation")]
    if not oom:
        return None
    return c.make("host_oom", 0.85, f"{oom[0].text[:160]} (the worker's death, "
                  f"{lost[0].text[:100]!r}, is its symptom)",
                  [_ev(e) for e in oom[:3]] + [_ev(lost[0])],
                  r if r is not None and r.incident is not None else _finding_of(
                      c.findings, lost[0]))


def _step_log_root(c: _Ctx) -> Draft | None:
    if c.root is None:
        return None
    v = c.app_verdict(c.root, 0.9 if (c.job.exit_code or c.sig or c.task_failed) else 0.7)
    st = c.straggler
    if st is not None:
        # every rank that said anything timed out in a collective: the culprit is the
        # rank that never reached it and reported nothing
        v.root_rank, v.root_node, v.root_step = st.rank, st.task.node, st.task.step
        v.detail += (f"; rank {st.rank} reported no timeout: it never reached the "
                     "collective (the straggler)")
        v.cascades = _cascades(c.findings, None)
    elif (r := _log_straggler(c.root)) is not None:
        v.root_rank = r
        v.detail += (f"; rank {r} reported no timeout and was stopped by the launcher: the "
                     "others waited on it (the straggler)")
    return v


def _step_cut_traceback(c: _Ctx) -> Draft | None:
    """A log whose last lines are a traceback's frames: the exception line was cut off."""
    if c.clean:
        return None
    for f in sorted(c.findings, key=_Finding.key):
        evs, scan = [e for e in f.events if e.rule.id != STOP_RULE], f.scan
        if not evs or scan is None or not (evs[-1].rule.scope == "traceback" or evs[-1].rule.id
                                           in _TB_MARKERS):
            continue
        if evs[-1].order < scan.segments - CUT_TAIL:
            continue
        head = max((i for i, e in enumerate(evs) if e.rule.id == "traceback_header"),
                   default=None)
        frames = evs[head:] if head is not None else evs[-20:]
        start = min((e.order for e in frames
                     if e.rule.id in _TB_MARKERS or e.rule.scope == "traceback"),
                    default=evs[-1].order)
        sigint = [e for e in evs if e.rule.id in INTERRUPT_NOTICE
                  and 0 <= start - e.order <= INTERRUPT_GAP]
        if sigint:
            # the launcher passed on a SIGINT just before: this is the interrupted program's
            # traceback (a KeyboardInterrupt), the job was stopped from outside like a cancel
            what, where = sigint[-1].text.strip()[:120], evs[-1].text.strip()[:160]
            return c.make("cancelled", 0.5, f"interrupted: {what} (SIGINT: Ctrl-C, or scancel "
                          "--signal=INT); the log ends inside the traceback the interrupt "
                          f"printed, its last frame {where}",
                          [_ev(sigint[-1])] + [_ev(e) for e in frames[-2:]], f)
        conf = [e for e in frames if e.role == "confirmation" and e.rule.scope == "traceback"]
        if not conf and any(e.rule.id == LAUNCHER_FRAME for e in frames):
            continue  # a launcher's own traceback: its child's lines (or its exitcode) decide
        cls = conf[-1].cls if conf else "python_exception"
        ev = [_ev(e) for e in ([conf[-1]] if conf else []) + frames[-2:]]
        return c.make(cls, 0.5 if conf else 0.4, "the log ends inside a traceback (its "
                      "exception line was cut off)", ev, f)
    return None


def _step_oom_evidence(c: _Ctx) -> Draft | None:
    oom = [e for e in c.kevents + c.all_events
           if e.cls == "host_oom" and e.role in ("root", "confirmation")]
    if not oom:
        return None
    return c.make("host_oom", 0.85, oom[0].text[:200], [_ev(e) for e in oom[:3]],
                  _finding_of(c.findings, oom[0]))


_SIGKILL_WORDS = re.compile(r"\b9\b|KILL|[Kk]illed|\b137\b|已杀死|強制|죽었음|Getötet|arrêté|"
                            r"Ucciso|Morto|Убито|Unicestwiony|Geëlimineerd|Dödad|Вбито|Zabit")


def _step_killed_memory(c: _Ctx) -> Draft | None:
    """f10k-: a SIGKILL reported by the shell or a launcher (precedence.yaml's symptoms) in a
    log that speaks of the host's memory (rule memory_pressure): the OOM killer is the likely
    killer, though the kernel's own report is not in the log."""
    if c.clean:
        return None
    kills = c.prec.symptoms.get("killed_memory", frozenset())
    k = next((e for e in c.confirmations if e.rule.id in kills
              and _SIGKILL_WORDS.search(e.text)), None)
    if k is None and c.sig != 9:
        return None
    mem = [e for e in c.all_events + c.kevents if e.rule.id == "memory_pressure"]
    if not mem:
        return None
    how = repr(k.text[:120]) if k is not None else "signal 9"
    ev = ([_ev(k)] if k is not None else []) + [_ev(mem[-1])]
    return c.make("host_oom", 0.6, f"killed by SIGKILL ({how}) in a log that speaks of host "
                  f"memory ({mem[-1].text[:120]!r}): the kernel's OOM killer is the likely "
                  "killer (the node's kernel log or sacct MaxRSS would confirm)", ev,
                  _finding_of(c.findings, k) if k is not None else c.sig_task)


def _step_confirmation(c: _Ctx) -> Draft | None:
    # weak confirmations (a rule with a confidence cap, e.g. a printed "Error: ...") yield to
    # the signal that ended the job
    confs = [e for e in c.confirmations if not (c.sig and e.rule.confidence is not None)]
    if not confs:
        return None
    e = confs[0]
    # a worker that vanished (worker_oom's symptoms) and the kernel saw a process crash: the
    # crash is how it died (the OOM killer's report decided before, step worker_oom)
    crash = [k for k in c.kevents if k.cls == "segfault" and k.rule.id == "kernel_process_segfault"]
    if crash and e.rule.id in c.prec.symptoms.get("worker_oom", frozenset()):
        return c.make("segfault", 0.7, f"{crash[0].text[:160]} (the worker's death, "
                      f"{e.text[:100]!r}, is its symptom)", [_ev(crash[0]), _ev(e)],
                      _finding_of(c.findings, e))
    conf = 0.8 if e.cls != "killed" else 0.6
    # a printed "Error: ..." is weak alone; a firm line of its class after it (a runtime's
    # closing words on an uncaught error: Node's "Node.js v20.x", R's "Execution halted")
    # makes it the program's uncaught error, its message still the detail
    firm = next((x for x in confs[1:] if x.cls == e.cls and x.rule.confidence is None), None)
    detail = e.text[:200]
    if e.rule.confidence is not None and firm is None:
        conf = min(conf, e.rule.confidence)
        if e.rule.detail and "{detail}" in e.rule.detail and e.detail \
                and e.detail != e.rule.detail:
            # the rule's words say what the line cannot (a pool's worker that died: of what
            # is not in the log); the line stays the evidence
            detail = e.rule.detail.replace("{detail}", e.detail)
    return c.make(e.cls, conf, detail, [_ev(x) for x in confs[:3]],
                  _finding_of(c.findings, e))


def _step_signal(c: _Ctx) -> Draft | None:
    who = c.sig_task
    core_dumped = who is not None and who.core_dumped
    code = "" if c.job.exit_code is None else c.job.exit_code
    hit = c.rs.match_fact("exit", f"exit_code={code} signal={c.sig or ''} "
                          f"core_dumped={int(core_dumped)}")
    if not hit:
        return None
    core = " (core dumped)" if core_dumped else ""
    how = f"signal {c.sig}{core}" if c.sig else f"exit code {code}"
    return c.make(hit[0].cls, 0.75 if c.sig else 0.6, f"terminated by {how}, no other evidence",
                  [{"file": "(exit status)", "line": None, "text": how}], who or c.first_fail)


def _first_failed_rank(c: _Ctx) -> int | None:
    """The rank that failed first by the launcher's word (torchrun's Root Cause block, srun's
    "task N: Exited with exit code", mpirun's "process rank N ... exited on signal" / "Process
    name: [[j,1],N]") or, else, by the exit records; None when unknown."""
    for s in c.scans:
        if s is None:
            continue
        rank, _ = _launcher_root(s.events) or (None, None)
        if rank is not None:
            return rank
    t = c.first_fail
    return t.rank if t is not None and t.step != "batch" else None


def _step_cascade(c: _Ctx) -> Draft | None:
    casc = sorted((f for f in c.findings if any(e.role == "cascade" for e in f.events)),
                  key=_Finding.key)
    if not casc:
        return None
    f = casc[0]
    e = next(e for e in f.events if e.role == "cascade")
    # a peer's "lost my peer" is no cause when the rank that failed first is another one that
    # said nothing: that rank's end decides (its exit code alone: unknown)
    root = _first_failed_rank(c)
    mine = e.label_rank if e.label_rank is not None else (None if f.from_batch else f.rank)
    if root is not None and mine is not None and root != mine:
        return None
    return c.make(e.cls, 0.45, f"only symptoms found: {e.text[:160]}", [_ev(e)], f)


def _step_slurm_state(c: _Ctx) -> Draft | None:
    if not c.state_cls:
        return None
    return c.make(c.state_cls, 0.8, f"Slurm state {c.state}", c.state_ev)


def _step_silent_end(c: _Ctx) -> Draft | None:
    """f10k-: a failed job (not clean) with no failure evidence whose log stops right after a
    collective was set up or entered (rule collective_setup): it hung in the collective; or
    whose log ends in hours of a monitor's periodic lines after the program's last line
    (endings._heartbeat_tail): the program hung while the job went on."""
    if c.clean or c.with_root or c.confirmations:
        return None
    for f in sorted(c.findings, key=_Finding.key):
        if f.scan is None or not f.events:
            continue
        last = f.events[-1]
        if last.rule.id != "collective_setup" or _lines_after(last, f.scan) >= CUT_TAIL:
            continue
        m = _CLOCK.search(last.text)
        at = f" at {m.group(1)}" if m else ""
        return c.make("hang", 0.4, f"the log stops{at} right after a collective was set up "
                      f"({last.text[:120]!r}, line {last.line}); no error line and no end line: "
                      "it hung in the collective (or was killed without a word)", [_ev(last)], f)
    # (or its last line is one of NCCL's set-up before the set-up's end)
    tails = _log_tails(c)
    setup = _stops_in_nccl_setup(tails)
    if setup is not None:
        text, n, path = setup
        m = _CLOCK.search(text)
        at = f" at {m.group(1)}" if m else ""
        return c.make("hang", 0.4, f"the log stops{at} inside NCCL's communicator set-up "
                      f"({text[:120]!r}, line {n}); no error line and no end line: it hung in "
                      "the set-up (or was killed without a word)",
                      [{"file": path, "line": n, "text": text[:300]}])
    # (or its last lines are a monitor's ticks, hours of them, after the program's last line)
    beat = _heartbeat_tail(c, tails)
    if beat is not None:
        span, before, tick, n, path = beat
        return c.make("hang", 0.4, f"the log's last lines are a monitor's periodic lines over "
                      f"{span / 3600:.1f} h (the last {tick[:100]!r}) after the program's last "
                      f"line {before[:100]!r}; no error line and no end line: the program wrote "
                      "nothing all that time while the job went on - it hung (evidence: the "
                      "log's own timestamps)", [{"file": path, "line": n, "text": tick[:300]}])
    return None


def _step_unknown(c: _Ctx) -> Draft:
    j = c.job
    what = "no exit status given and " if j.exit_code is None and not c.state else ""
    where = _where_it_stops(c) if not c.state_ev else ""
    v = c.make("unknown", 0.3, f"{what}nothing recognisable in the logs"
               + (f" (exit code {j.exit_code})" if j.exit_code else "")
               + (f"; {where}" if where else ""), c.state_ev)
    # why is unknown, but where is not when srun or the launcher names the task that failed
    # ("srun: error: n3: task 1: Exited with exit code 3") or the exit records of several
    # ranks say which failed first (the others' peer-lost cascades came after it)
    ranks = {t.rank for t in c.tasks if t.step != "batch"}
    if any(e.ref_rank is not None for e in c.all_events) or (
            len(ranks) > 1 and c.first_fail is not None and c.first_fail.step != "batch"):
        c.locate(v, None)
    return v


Step = Callable[[_Ctx], Draft | None]

# every decision step by its precedence.yaml id (in the shipped order; the file's order is
# the one that counts)
STEPS: dict[str, Step] = {
    "hardware": _step_hardware,
    "node_failure": _step_node_failure,
    "hang": _step_hang,
    "preempted": _step_preempted,
    "time_limit_or_cancel": _step_time_limit_or_cancel,
    "host_oom_state": _step_host_oom_state,
    "silent_failure": _step_silent_failure,
    "abandoned": _step_abandoned,
    "clean_exit": _step_clean_exit,
    "worker_oom": _step_worker_oom,
    "log_root": _step_log_root,
    "cut_traceback": _step_cut_traceback,
    "oom_evidence": _step_oom_evidence,
    "killed_memory": _step_killed_memory,
    "confirmation": _step_confirmation,
    "signal": _step_signal,
    "cascade": _step_cascade,
    "slurm_state": _step_slurm_state,
    "silent_end": _step_silent_end,
    "unknown": _step_unknown,
}


def load_precedence(text: str | None = None) -> list[str]:
    """The step ids of precedence.yaml (or of `text`), in order. Raises RuleError naming the
    file and field when an id names no step, one is repeated, or 'unknown' (the last resort)
    is missing."""
    return list(precedence.load(text, STEPS).steps)


@functools.cache
def shipped_precedence() -> precedence.Precedence:
    """The shipped precedence.yaml, read once (RuleError when it is wrong)."""
    return precedence.load(None, STEPS)


def decide(c: _Ctx) -> Draft:
    """The verdict of the first step, in c.prec's order, that gives one."""
    for step in c.prec.steps:
        v = STEPS[step](c)
        if v is not None:
            v.step = step
            return v
    return _step_unknown(c)
