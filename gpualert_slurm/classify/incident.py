"""Traceback and exception-chain analysis: which root event of a log is its incident (the first
root line, the most specific line of its incident window, the exception that ended a chained
traceback, the frames that confirm or demote it), a traceback's exception line that no rule
names, and whether an exception's stack was printed."""

from __future__ import annotations

import dataclasses
import re

from gpualert_slurm.classify.logread import _log_lines
from gpualert_slurm.classify.rules import RuleSet
from gpualert_slurm.classify.scan import Event, ScanResult, line_view
from gpualert_slurm.core.spool import open_log

SCHEDULER = frozenset({"time_limit", "preempted", "cancelled", "node_failure"})
INCIDENT_WINDOW = 8  # lines after the first root event that still belong to the same incident
FRAME_WINDOW = 80  # lines before a generic exception where its traceback's frames are
CHAIN_WINDOW = 1000  # lines from a chain marker to the next exception (its traceback's frames)


def _segment_best(events: list[Event], i: int) -> Event:
    """The most specific root event within the incident window that starts at events[i]."""
    first = best = events[i]
    for e in events[i + 1:]:
        if e.order > first.order + INCIDENT_WINDOW or e.role == "chain":
            break  # a chain marker: what follows is the next exception of a chain
        if e.role == "root" and e.cls not in SCHEDULER and (
                e.priority > best.priority
                # a traceback's source line ("    raise XError(...)") vs its exception line
                or (e.priority == best.priority and best.indented and not e.indented)):
            best = e
    return best


# a JVM cause: "Caused by: <fq.Class>[: msg]" comes after the frames of the exception it caused
# (Throwable.printStackTrace), the next exception of the chain on its own line, no marker before
_JVM_CAUSE = re.compile(r"(?:^|[\s:\]])Caused by: (?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?::\s|\s*$)")


def _chain(events: list[Event], i: int, best: Event) -> tuple[Event, int]:
    """Follow a chained traceback ("During handling of the above exception ..." / "The above
    exception was the direct cause ...") from the incident at events[i] to the exception that
    finally ended the program. Returns (decisive event, index of its segment's first root).

    The last exception decides; a generic last one (python_exception) or a weak one (a rule
    with a confidence cap) leaves the decision to the latest more specific cause in the chain
    (a RuntimeError wrapping ENOSPC is disk_full).
    """
    def seg_end(k: int) -> int:  # the last root line of the exception starting at events[k]
        end = events[k].order
        for e in events[k + 1:]:
            if e.order > events[k].order + INCIDENT_WINDOW or e.role == "chain":
                break
            if e.role == "root":
                end = e.order
        return end

    segs = [(best, i)]
    end = seg_end(i)
    j = i + 1
    while j < len(events):
        e = events[j]
        nested = _nested_traceback(e, segs[-1][0])
        if (e.role == "root" and end < e.order <= end + CHAIN_WINDOW
                and _JVM_CAUSE.search(e.text)):
            segs.append((_segment_best(events, j), j))  # a JVM cause: the line is its exception
            end = seg_end(j)
            j += 1
            continue
        if (e.role == "chain" or nested) and end < e.order <= end + INCIDENT_WINDOW:
            # the next exception of the chain: the first root after the marker (after its
            # traceback's frames; deep ones are long)
            k = next((k for k in range(j + 1, len(events))
                      if events[k].role == "root" and events[k].cls not in SCHEDULER
                      and events[k].order > e.order), None)
            if k is None or events[k].order > e.order + CHAIN_WINDOW:
                break
            b = _segment_best(events, k)
            if nested and b.cls == "python_exception":
                break  # a wrapper around a generic error: the wrapper's line says as much
            segs.append((b, k))
            end = seg_end(k)
            j = k + 1
            continue
        if e.order > end + INCIDENT_WINDOW:
            break
        j += 1
    last, k = segs[-1]
    # the host's memory ran out inside the program (MemoryError, bad_alloc): what the chain
    # raised after it - a half-written file's "unexpected pos", a cleanup that failed - is
    # its consequence (issue 32)
    oom = [s for s in segs[:-1] if s[0].cls == "host_oom"]
    if oom and last.cls != "host_oom":
        return oom[0]
    # a weak last wording (a rule with a confidence cap: fsspec's FileNotFoundError(url) for
    # any failed request) yields to a firm cause earlier in its chain, like a generic one
    if last.cls == "python_exception" or last.rule.confidence is not None:
        specific = [s for s in segs if s[0].cls != "python_exception"
                    and s[0].rule.confidence is None]
        if specific:
            return specific[-1]
    return last, k


def _nested_traceback(e: Event, wrapper: Event) -> bool:
    """A traceback printed inside a generic exception's message, right after its line: a
    wrapper that carries the error it caught (torch.distributed.checkpoint's
    CheckpointException prints each rank's "Traceback (most recent call last): (RANK 0)",
    Ray's RayTaskError(OSError) the remote frames). The error inside is the cause, as in a
    chain."""
    return (wrapper.cls == "python_exception" and e.label_rank == wrapper.label_rank
            and e.rule.id in ("traceback_header", "traceback_frame"))


def _frames(events: list[Event], k: int, lo: int) -> list[Event]:
    """Traceback-scoped events (frames) among the 50 before events[k], from line order lo on."""
    return [e for e in events[max(0, k - 50):k]
            if e.rule.scope == "traceback" and lo <= e.order < events[k].order]


def _incident(events: list[Event]) -> tuple[Event | None, Event | None]:
    """First root event in line order; the most specific root within its incident window;
    for a chained traceback, the exception that ended it (see _chain).

    Traceback-scoped rules (frames) between the previous root event and a root exception line
    apply to it: a cascade frame makes it a symptom (the next root is looked at), a
    confirmation frame gives a generic python_exception the frame rule's class.
    """
    prev = -1
    for i, first in enumerate(events):
        if first.role != "root" or first.cls in SCHEDULER:
            continue
        lo = max(prev + 1, first.order - FRAME_WINDOW)
        prev = first.order
        frames = _frames(events, i, lo)
        if any(f.role == "cascade" for f in frames):
            continue
        best, k = _chain(events, i, _segment_best(events, i))
        if k != i:  # a later exception of the chain: the frames of its own traceback count
            seg_lo = max((e.order for e in events[:k] if e.role == "chain"), default=lo)
            frames = _frames(events, k, seg_lo)
        conf = [f for f in frames if f.role == "confirmation"]
        # a python_exception rule with a detail of its own names a known program error (not
        # a generic one): the frames it was raised in do not change what it is
        if best.cls == "python_exception" and best.rule.detail is None and conf:
            f = conf[-1]
            best = dataclasses.replace(best, file=f.file, line=f.line, text=f.text, rule=f.rule,
                                       detail=best.text[:200])
        return best, first
    return None, None


TB_TAIL = 256 << 10  # bytes of a log's end searched for its tracebacks' exception lines
TB_SKIP = 12  # lines after a frame (its source, carets, blanks) before its exception line
_FRAME_LINE = re.compile(r'^\s*File "[^"]*", line \d+, in \S')


# what Python prints as a traceback's last line: `[module.]Name: message`, or `module.Name`
_EXC_END = re.compile(r"(?P<name>(?:[A-Za-z_]\w*\.)*_?[A-Z]\w*)(?P<msg>: \S.*|:?\s*)$")


# words that label an ordinary log line ("Note: ...", "Usage: ...") rather than name a class
_NOT_EXC = frozenset({"Note", "Notes", "Hint", "Info", "Warning", "Warn", "Debug", "Usage",
                      "Example", "Tip", "See", "Reason", "Details", "Detail", "Message",
                      "Status", "Summary", "Output", "Result", "Results", "Done", "Epoch",
                      "Step", "Loss", "Time", "Traceback", "Error", "Exception", "Fatal"})


def _exception_end(body: str) -> str | None:
    """The class a traceback's last line names, or None when the line is not one: a dotted
    `module.Name[: msg]` (`onnxruntime...InvalidProtobuf: ...`, `grpc._channel._InactiveRpcError:
    ...`), or a script's own bare `Name: msg` (`class Abort(Exception)` in __main__ prints
    `Abort: msg`) that is not an all-caps level or a label word (INFO, Note)."""
    m = _EXC_END.fullmatch(body)
    if m is None:
        return None
    name = m.group("name")
    if "." in name:
        return name
    if not m.group("msg").startswith(":") or name in _NOT_EXC or name.upper() == name:
        return None
    return name


def _traceback_ends(scan: ScanResult, rs: RuleSet) -> None:
    """The line that ends a Python traceback is its exception, whatever its class is called.
    Rules know the usual names (...Error, ...Exception); a class named otherwise (ONNX
    Runtime's InvalidProtobuf, grpc's _InactiveRpcError, a script's Abort) matches no rule.
    For each traceback in the log's last TB_TAIL bytes, the first unindented line after its
    last frame (past the frame's source and caret lines) that no rule matched and that reads
    as `Name: message` becomes a python_exception event (priority 10: any specific rule of
    the same incident still decides)."""
    frames = [e for e in scan.events if e.rule.id == "traceback_frame"]
    exc_rule = next((r for r in rs.rules if r.id == "python_exception"), None)
    if not frames or exc_rule is None:
        return
    try:
        with open_log(scan.path) as f:
            start = max(0, scan.size - TB_TAIL)
            f.seek(start)
            data = f.read(TB_TAIL)
    except OSError:
        return
    lines = data.split(b"\n")
    if start:
        lines = lines[1:]  # a partial first line
    if lines and not lines[-1]:
        lines.pop()
    # the scanner's segments: CR ends a segment too (Event.order counts them)
    segs: list[tuple[int, bytes]] = [(n, seg) for n, raw in enumerate(lines)
                                     for seg in raw.split(b"\r")]
    # the tail's segment i is the scan's order i + delta: calibrated on the log's last event
    last = scan.events[-1]
    delta = next((last.order - i for i in range(len(segs) - 1, -1, -1)
                  if segs[i][1].decode("utf-8", "replace").rstrip() == last.text), None)
    if delta is None:
        return
    by_order = {e.order: e for e in scan.events}
    added: list[Event] = []
    for i, (n, seg) in enumerate(segs):
        if b'File "' not in seg:
            continue
        frame = by_order.get(i + delta)
        if frame is None or frame.rule.id != "traceback_frame":
            continue
        j, skipped = i + 1, 0
        while j < len(segs) and skipped <= TB_SKIP:
            body = line_view(segs[j][1].decode("utf-8", "replace")).body
            if body.strip() and not body[:1].isspace():
                break
            if body.lstrip().startswith(("|", "+-")):  # an exception group's members
                j = len(segs)
                break
            j, skipped = j + 1, skipped + 1
        if j >= len(segs) or skipped > TB_SKIP or (j + delta) in by_order:
            continue
        view = line_view(segs[j][1].decode("utf-8", "replace"))
        body = view.body.strip()
        name = _exception_end(body)
        # (any_match: as any rule's match, trying only the rules whose literals it holds)
        if name is None or _FRAME_LINE.match(body) or rs.any_match(body, ("log", "kernel")):
            continue
        ev = Event(scan.path, frame.line + (segs[j][0] - n) if frame.line else None,
                   segs[j][1].decode("utf-8", "replace").rstrip()[:500], exc_rule, name,
                   j + delta, view.task, view.rank, view.local)
        by_order[ev.order] = ev
        added.append(ev)
    if added:
        scan.events = sorted(scan.events + added, key=lambda e: e.order)


def _logged_traceback(events: list[Event], inc: Event) -> bool:
    """A traceback header shortly before exception `inc`, or its stack printed under it: the
    program printed the traceback (logging.exception, traceback.print_exc, a thread's
    excepthook, JavaScript's console.error(err), Java's printStackTrace), not just a message."""
    return any(e.rule.id == "traceback_header" and inc.order - FRAME_WINDOW <= e.order
               < inc.order for e in events) or _stack_under(inc, None) > 0


# a line of an exception's stack printed under its message line (other runtimes than Python):
# an indented frame (JavaScript's "    at f (file.js:3:9)", the JVM's "\tat ...", Rust's
# backtrace, Go's "\t/src/x.go:41 +0x1d"), a blank line, a runtime's stack heading, Go's
# "main.f(...)" and the "}" closing the properties Node prints with an error
_STACK_LINE = re.compile(r"\s*|\s+\S.*|(?:stack backtrace|Stack trace|Caused by|goroutine \d+ \[)"
                         r".*|[\w./*()\[\]-]+\(.*\)(?: \+0x[0-9a-f]+)?|\}\s*")


def _stack_under(inc: Event, until: Event | None) -> int:
    """How many lines of exception `inc`'s printed stack follow its line, up to `until` (a
    later line of its log, which must come right after the stack) or to the stack's end:
    0 when no frame follows (or when another line comes before `until`)."""
    if inc.line is None or (until is not None and (until.line is None or not 0 < until.line
                                                   - inc.line <= FRAME_WINDOW + 1)):
        return 0
    last = inc.line + FRAME_WINDOW if until is None else until.line - 1
    n = 0
    try:
        for body in _log_lines(inc.file, inc.line, last):
            if not _STACK_LINE.fullmatch(body):
                if until is not None:
                    return 0
                break
            n += 1
    except OSError:
        return 0
    return n


def _exception_name(dotted: str) -> str:
    """`sqlite3.OperationalError` -> `OperationalError`; a bare `Error`/`Exception` keeps its
    module (`_csv.Error`), which is the only thing that tells what raised it."""
    if not re.fullmatch(r"[A-Za-z_][\w.]*", dotted):
        return dotted
    mod, _, name = dotted.rpartition(".")
    return dotted if mod and name in ("Error", "Exception") else name
