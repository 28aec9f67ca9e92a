"""Where a job failed first: each log's findings (the batch log split by rank label), the root
rank, node and step of a verdict, the node Slurm lost, the straggler of a collective timeout,
and the other ranks' errors (cascades) that were symptoms of the root cause."""

from __future__ import annotations

from gpualert_slurm.classify.incident import _incident
from gpualert_slurm.classify.model import Draft, TaskInput, _Finding
from gpualert_slurm.classify.scan import Event, ScanResult

MAX_CASCADES = 20


def _findings(tasks: list[TaskInput], scans: list[ScanResult | None]) -> list[_Finding]:
    per_task: list[_Finding] = []
    batch: list[_Finding] = []
    for t, s in zip(tasks, scans, strict=True):
        if s is None:
            continue
        if t.step == "batch":
            # the batch log carries srun's forwarded output of every rank: split it by label
            # (an unlabelled line is no rank's: the batch task is not a rank of the job)
            # srun's own lines about a task ("srun: error: n2: task 1: Out Of Memory") are that
            # task's: they take its place in time (its exit record's end)
            groups: dict[tuple[bool, int | None], list[Event]] = {}
            for e in s.events:
                named = e.ref_rank is not None
                groups.setdefault((named, e.ref_rank if named else e.label_rank), []).append(e)
            for (named, rank), evs in groups.items():
                owner = _task_of(tasks, rank) if named else None
                batch.append(_Finding(owner or t, rank, evs, from_batch=True, scan=s,
                                      named=owner is not None))
        else:
            per_task.append(_Finding(t, t.rank, s.events, scan=s))
    for f in per_task + batch:
        f.incident, f.first_root = _incident(f.events)
    # per-rank step logs are the better witness; the batch log is the fallback, except for
    # what srun says about a task
    if any(f.incident for f in per_task):
        return per_task + [b for b in batch if not b.incident or b.named]
    return per_task + batch


def _batch_host_lost(tasks: list[TaskInput], v: Draft) -> Draft:
    """No node named: the batch step runs on the job's first node (rank 0's); when it left no
    exit record while Slurm says a node failed, that node went with it (a surviving batch
    host records how its step ended)."""
    b = next((t for t in tasks if t.step == "batch" and _no_exit(t)), None)
    if b is None or any(t.node and t.node == b.node and not _no_exit(t) for t in tasks):
        return v
    v.root_rank, v.root_step = b.rank if b.rank is not None else 0, b.step
    v.root_node = b.node or v.root_node
    v.detail += ("; the batch step (the job's first node" + (f", {b.node}" if b.node else "")
                 + ", where rank 0 runs) left no exit record: lost with its node")
    return v


def _no_exit(t: TaskInput) -> bool:
    """No exit record: a task whose node died with it (its node is known from its start
    record)."""
    return t.exit_code is None and t.signal is None and t.end_time is None


def _lost_node(events: list[Event], tasks: list[TaskInput]) -> tuple[str | None, list[TaskInput]]:
    """The node Slurm lost and the ranks that ran there without an exit record, first rank
    first. The node is the one a node-failure line names (the rules' `node` group); else,
    when other nodes' tasks left exit records, the one node none of whose tasks did."""
    named = [e.ref_node for e in events
             if e.cls == "node_failure" and e.role == "root" and e.ref_node]
    ranks = [t for t in tasks if t.step != "batch" and t.rank is not None and t.node]
    node = named[0] if named else None
    if node is None:
        exited = {t.node for t in ranks if not _no_exit(t)}
        silent = {t.node for t in ranks if _no_exit(t)} - exited
        if not exited or len(silent) != 1:
            return None, []
        node = silent.pop()

    def order(t: TaskInput) -> tuple:
        step = t.step or ""
        return (not step.isdigit(), int(step) if step.isdigit() else 0, step, t.rank)
    lost = sorted((t for t in ranks if t.node == node and _no_exit(t)), key=order)
    if not lost and named and node not in {t.node for t in ranks}:
        # no task is known to have run on the named node: its tasks' records went with it,
        # so the ranks with neither an exit nor a start record (no node) were the lost ones
        lost = sorted((t for t in tasks if t.step != "batch" and t.rank is not None
                       and not t.node and _no_exit(t)), key=order)
    return node, lost


def _locate(v: Draft, at: _Finding | TaskInput | None, tasks: list[TaskInput],
            scans: list[ScanResult | None], first_fail: TaskInput | None) -> None:
    """Which rank and node failed first, from the best witness there is: the rank's own log
    (its global [rankN] label when one Slurm task runs several ranks); else torchrun's Root
    Cause block, mpirun's / Hydra's line naming the rank, srun's task-level lines (srun: error:
    n2: task 1: Out Of Memory), the exit
    records (the first to end by itself, not by srun's SIGTERM); the batch log never names a
    rank by itself, it holds every rank's forwarded lines."""
    if isinstance(at, _Finding) and not at.from_batch and at.incident is not None:
        inc = at.incident
        elastic = _launcher_root(at.events)
        # torch's [rankN] is the global rank; it says more than the Slurm task's rank when the
        # task runs several ranks (torchrun per node: its log holds several labels)
        labels = {e.rank_label for e in at.events if e.rank_label is not None}
        local = any(e.local_label is not None for e in at.events)
        if inc.rank_label is not None and (len(labels) > 1 or local or at.rank is None):
            v.root_rank = inc.rank_label
        elif elastic and elastic[0] is not None:
            v.root_rank = elastic[0]
        else:
            v.root_rank = at.rank
        v.root_node, v.root_step = at.task.node, at.task.step
        if elastic and elastic[0] is not None and elastic[1] and not at.task.node:
            v.root_node = elastic[1]  # mpirun's ranks run on hosts the Slurm task is not on
        return
    if isinstance(at, TaskInput) and at.step != "batch":
        v.root_rank, v.root_node, v.root_step = at.rank, at.node, at.step
        return
    for s in scans:
        if s is None:
            continue
        rank, node = _launcher_root(s.events) or (None, None)
        if rank is None:
            srun = [e for e in s.events if e.ref_rank is not None or e.ref_node is not None]
            # a line that names a task failing by itself beats one naming a lost node
            srun.sort(key=lambda e: e.ref_rank is None)
            if srun:
                rank, node = srun[0].ref_rank, srun[0].ref_node
        if rank is not None or node is not None:
            v.root_rank, v.root_node = rank, node
            t = _task_of(tasks, rank)
            if t is not None:
                v.root_node = node or t.node
                v.root_step = t.step
            return
    t = first_fail if first_fail is not None and first_fail.step != "batch" else None
    if t is not None:
        v.root_rank, v.root_node, v.root_step = t.rank, t.node, t.step
    elif isinstance(at, _Finding) and at.rank is not None:  # a labelled line of the batch log
        v.root_rank, v.root_node = at.rank, None
        t = _task_of(tasks, at.rank)
        if t is not None:
            v.root_node, v.root_step = t.node, t.step


def _task_of(tasks: list[TaskInput], rank: int | None) -> TaskInput | None:
    return next((t for t in tasks if rank is not None and t.rank == rank
                 and t.step != "batch"), None)


def _elastic_root(events: list[Event]) -> tuple[int | None, str | None] | None:
    """torchrun's "Root Cause (first observed failure)" block: (global rank, host)."""
    for i, e in enumerate(events):
        if e.rule.id == "elastic_root_cause":
            near = [x for x in events[i + 1:i + 8] if x.order - e.order <= 10]
            rank = next((x.ref_rank for x in near if x.ref_rank is not None), None)
            node = next((x.ref_node for x in near if x.ref_node is not None), None)
            if rank is not None or node is not None:
                return rank, node
    return None


# lines of a launcher that name the rank that failed first (rules with a (?P<rank>) group:
# srun's task lines, Open MPI's mpirun, MPICH's Hydra); torchrun's summary is read as a block
_ELASTIC_RULES = ("elastic_root_rank", "elastic_root_host", "elastic_rank_terminated")


def _launcher_root(events: list[Event]) -> tuple[int | None, str | None] | None:
    """(rank, node) of the first failure by a launcher's word: torchrun's Root Cause block,
    else the first line that names a failed rank (srun "n2: task 1: Exited with exit code 3",
    mpirun "process rank 2 with PID .. on node n3 exited on signal 11", its "Process name:
    [[31091,1],2]" under "detected that one or more processes exited with non-zero status",
    Hydra's "RANK 2 PID .. RUNNING AT n3"). A single Slurm task that runs mpirun holds every MPI
    rank: the launcher's rank says more than the task's."""
    elastic = _elastic_root(events)
    if elastic is not None:
        return elastic
    e = next((e for e in events if e.ref_rank is not None
              and e.rule.id not in _ELASTIC_RULES), None)
    return (e.ref_rank, e.ref_node) if e is not None else None


# srun's report of how a task ended (from the batch log): said of a rank whose own log holds
# its cause, it is that cause's end, not a second cause
_RANK_END_RULES = frozenset({"srun_task_crashed", "srun_task_killed"})


def _straggler(findings: list[_Finding], with_root: list[_Finding]) -> _Finding | None:
    """In a collective timeout, the rank whose log has no error is the one the others waited on.

    Only when every rank with a root cause timed out in a collective; among several silent
    ranks, the one that ended last (killed by the launcher after the others gave up).
    """
    # srun's line on how a rank ended ("task 2: Aborted (core dumped)") is the end of a
    # rank whose own log timed out: torch's watchdog ends the process with std::terminate
    timed_out = {f.rank for f in with_root if not f.from_batch
                 and f.incident.cls == "collective_timeout"}
    with_root = [f for f in with_root if not (f.from_batch and f.rank in timed_out
                                              and f.incident.rule.id in _RANK_END_RULES)]
    if not with_root or any(f.incident.cls != "collective_timeout" for f in with_root):
        return None
    silent = [f for f in findings if not f.from_batch and f.rank is not None
              and not any(e.role in ("root", "cascade") for e in f.events)]
    if not silent:
        return None
    return max(silent, key=lambda f: (f.task.end_time or 0.0, -(f.rank or 0)))


def _elastic_terminated(events: list[Event]) -> list[int]:
    """The ranks torchrun's failure summary lists as stopped by the agent (exitcode -15): a
    `rank : N (local_rank: M)` line just before an `exitcode : -15` one."""
    out: list[int] = []
    for i, e in enumerate(events):
        if e.rule.id != "elastic_rank_terminated":
            continue
        prev = next((x for x in reversed(events[max(0, i - 3):i])
                     if x.rule.id == "elastic_root_rank" and e.order - x.order <= 3), None)
        if prev is not None and prev.ref_rank is not None and prev.ref_rank not in out:
            out.append(prev.ref_rank)
    return out


def _log_straggler(f: _Finding | None) -> int | None:
    """The straggler inside one launcher's log that holds several ranks' lines (torchrun's
    `[rankN]:` / `[defaultN]:`): when every rank that reported an error timed out in a
    collective, the one rank the launcher had to stop (exitcode -15) without an error of its
    own is the rank the others waited on. None when that is not clear."""
    if f is None or f.incident is None or f.incident.cls != "collective_timeout":
        return None
    groups: dict[int | None, list[Event]] = {}
    for e in f.events:
        groups.setdefault(e.rank_label if e.rank_label is not None else e.local_label,
                          []).append(e)
    reported: set[int] = set()
    for rank, evs in groups.items():
        inc, _ = _incident(evs)
        if inc is not None and inc.cls != "collective_timeout":
            return None
        if inc is not None and rank is not None:
            reported.add(rank)
    stopped = [r for r in _elastic_terminated(f.events) if r not in reported]
    if reported and len(stopped) == 1:
        return stopped[0]
    if stopped or not reported:
        return None
    # no failure summary (a log cut short): every worker of a collective timeout either
    # reported it or was still running (the straggler, and a reporting rank still exiting)
    # when the launcher stopped the rest. The one rank below the highest reporting one that
    # reported nothing; or, ranks 0..k all reporting and one worker stopped, rank k+1 (ranks
    # of another node, several gaps: not clear)
    stops = {e.text for e in f.events if e.rule.id == "elastic_stopping_worker"}
    gaps = set(range(max(reported) + 1)) - reported
    if stops and len(gaps) == 1:
        return gaps.pop()
    return max(reported) + 1 if not gaps and len(stops) == 1 else None


def _finding_of(findings: list[_Finding], e: Event) -> _Finding | None:
    return next((f for f in findings if e in f.events), None)


def _cascades(findings: list[_Finding], root: _Finding | None) -> list[dict]:
    """Other ranks' errors (and the root rank's later errors): symptoms of the root cause."""
    out: list[dict] = []
    for f in sorted(findings, key=_Finding.key):
        if f is root:
            later = [e for e in f.events if e.role in ("root", "cascade")
                     and f.incident is not None and e.order > f.incident.order
                     and e.cls != f.incident.cls]
            picks = later[:3]
        else:
            first = f.first_root or next((e for e in f.events if e.role == "cascade"), None)
            picks = [f.incident or first] if first else []
        for e in picks:
            if e is None:
                continue
            out.append({"rank": f.rank, "cls": e.cls, "file": e.file, "line": e.line,
                        "text": e.text[:300]})
    return out[:MAX_CASCADES]
