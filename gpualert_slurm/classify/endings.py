"""How a log ends, read for the steps that decide from it: Slurm's or a kill's end line and the
silence before it, a collective set up and then nothing, work that went on after an error, a
run of skipped steps, work abandoned after a logged error, and where a log stops."""

from __future__ import annotations

import re

from gpualert_slurm.classify.context import _Ctx
from gpualert_slurm.classify.incident import (
    FRAME_WINDOW,
    INCIDENT_WINDOW,
    SCHEDULER,
    _incident,
    _logged_traceback,
    _stack_under,
)
from gpualert_slurm.classify.logread import _raw_lines, _tail_lines
from gpualert_slurm.classify.scan import Event, ScanResult, line_view

CUT_TAIL = 3  # a traceback frame within this many lines of a log's end: the log was cut
SKIP_RUN = 2  # a log ending in this many skipped-NaN lines in a row: the loop never recovered
END_TAIL = 5  # an exception within this many lines of a log's end were the program's last words
ABANDON_RULE = "work_abandoned"  # rules/*.yaml: a logged error saying the work stops
STOP_RULE = "work_stopped"  # rules/*.yaml: any line saying the work stopped (crashed, exiting)


LOG_HANG_S = 3600.0  # from a log alone: silence before Slurm's end line that counts as a hang


# Slurm's end line's time ("CANCELLED AT 2022-05-08T13:04:44"); a log line's own time: an ISO
# date and time ("2022-05-06 17:39:13", "[2023-06-07 22:24:46,260]") or glog's "I0506 17:39:13"
_SLURM_AT = re.compile(r"CANCELLED AT (\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)")
_ISO_TIME = re.compile(r"\b(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)\b")
_GLOG_TIME = re.compile(r"^\s*[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.\d+ ")


def _line_time(raw: str, year: int) -> float | None:
    """A log line's own time (seconds, naive clock), or None."""
    import calendar

    m = _ISO_TIME.search(raw[:80])
    if m:
        y, mo, d, hh, mm, ss = map(int, m.groups())
    elif (m := _GLOG_TIME.match(raw)):
        y, (mo, d, hh, mm, ss) = year, map(int, m.groups())
    else:
        return None
    try:
        return float(calendar.timegm((y, mo, d, hh, mm, ss, 0, 0, 0)))
    except (ValueError, OverflowError):
        return None


_END_CLASSES = frozenset({"time_limit", "cancelled", "killed"})  # how a stuck job is ended
SETUP_GAP = 5  # lines from a collective's set-up line to the end line: nothing happened between
QUIET_TAIL = 2  # untimed lines between the last timed line and the end line: output went on


def _end_time(c: _Ctx) -> tuple[Event, str] | None:
    """The line that says how the job was ended, and the text that carries its time: Slurm's
    time-limit or cancel line ("CANCELLED AT <time>"), else the first kill / stop line (a
    launcher's, torchrun's "Received 15 death signal", a timestamped "Killed") with a time
    stamp of its own."""
    lim = c.sched_event
    if lim is not None and lim.cls in ("time_limit", "cancelled") and lim.line:
        m = _SLURM_AT.search(lim.text)
        if m is not None:
            return lim, "{}-{}-{} {}:{}:{}".format(*m.groups())
    for e in c.all_events:
        if e.cls in _END_CLASSES and e.role in ("root", "cascade", "confirmation") and e.line \
                and _line_time(e.text, 2000) is not None:
            return e, e.text
    return None


def _log_silence(c: _Ctx) -> tuple[float, str, Event] | None:
    """f10k-: with no heartbeat, a log alone: the line that ended the job carries its time
    (_end_time); the log's last line with a time of its own before it (the same file, with at
    most QUIET_TAIL untimed lines between: no output went on untimed) came long before -
    longer than the hang threshold (LOG_HANG_S when the job gave none) and ten times the log's
    own spacing of timed lines. (silence, the last timed line, the end line)."""
    got = _end_time(c)
    if got is None:
        return None
    lim, when = got
    try:
        raws = [r for r in _raw_lines(lim.file, max(0, lim.line - 400), lim.line - 1)]
    except OSError:
        return None
    # year-less stamps (glog's) take the year of a dated line of the log
    year = next((int(m.group(1)) for r in [when, *raws] if (m := _ISO_TIME.search(r[:80]))),
                2000)
    end = _line_time(when, year)
    stamps: list[tuple[float, str]] = []
    untimed = 0
    for raw in raws:
        t = _line_time(raw, year)
        if t is not None:
            stamps.append((t, raw.strip()))
            untimed = 0
        elif raw.strip():
            untimed += 1
    if end is None or not stamps or untimed > QUIET_TAIL:
        return None
    gap = end - stamps[-1][0]
    steps = sorted(b[0] - a[0] for a, b in zip(stamps, stamps[1:], strict=False) if b[0] > a[0])
    cadence = steps[len(steps) // 2] if steps else 0.0
    if gap < (c.job.hang_threshold_s or LOG_HANG_S) or gap < 10 * cadence:
        return None
    return gap, stamps[-1][1], lim


def _stuck_after_setup(c: _Ctx) -> tuple[Event, Event] | None:
    """f10k-: a log whose last words before how the job was ended (Slurm's time limit or
    cancel, a kill, the launcher stopping its workers) are a collective being set up (rule
    collective_setup: NCCL's init, an all-reduce being built), with no error between: it hung
    there. (the set-up line, the end line)."""
    for f in c.findings:
        evs = f.events
        at = max((i for i, e in enumerate(evs) if e.rule.id == "collective_setup"), default=None)
        if at is None:
            continue
        after = [e for e in evs[at + 1:] if e.role != "marker" and e.role != "context"]
        if not after or any(e.cls not in _END_CLASSES for e in after):
            continue
        setup, end = evs[at], after[0]
        if setup.line is not None and end.line is not None and end.line - setup.line <= SETUP_GAP:
            return setup, end
    return None


# f10k-: output that shows the program still working: a progress bar (tqdm's "37%|###  | 37/100
# [...]"), a Python warnings-module line ("x.py:12: RuntimeWarning: ..."), a training-loop count
_WORK_LINE = re.compile(r"\d+%\|[^|]*\|\s*\d+/\d+|^\S+\.py:\d+: \w*Warning: "
                        r"|(?i:\b(?:epoch|step|iter(?:ation)?|batch)\b\s*[:=]?\s*\d+)")


def _went_on(inc: Event, lim: Event) -> bool:
    """The program printed signs of work between the cause and Slurm's line (the same rank's
    lines; Slurm's line glued onto a progress bar counts): it had survived that error (conda's
    "CommandNotFoundError" before the script ran python anyway, a warning logged as an
    error) and was still running when Slurm ended it."""
    if inc.line is None or lim.line is None or lim.line <= inc.line:
        return False
    glued = lim.text.split("slurmstepd", 1)[0] if "slurmstepd" in lim.text else ""
    if glued and _WORK_LINE.search(glued):
        return True
    try:
        for raw in _raw_lines(inc.file, inc.line, lim.line - 1):
            view = line_view(raw)
            if view.rank == inc.rank_label and view.task == inc.task_label \
                    and _WORK_LINE.search(view.body):
                return True
    except OSError:
        return False
    return False


HEARTBEAT_SHAPES = 3  # a monitor prints at most this many lines of its own shapes a tick
HEARTBEAT_TICKS = 3  # ... and this many ticks at least, to be a monitor's and not a chance
HEARTBEAT_TAIL = 60  # lines read from a log's end to find them
HEARTBEAT_LOGS = 4  # in the first logs of a job only (each tail read counts the log's lines)
_DIGITS = re.compile(r"\d+")


# NCCL's communicator set-up with NCCL_DEBUG=INFO, in the order it prints it (init.cc,
# bootstrap.cc, net plugins, graph/topo.cc ncclTopoPrint and its path dump, graph/search.cc,
# graph/connect.cc, enqueue tuning): "NCCL version 2.x+cudaY", "cudaDriverVersion N",
# "Bootstrap : Using eth0:...", "NET/IB : Using [0]mlx5_0:1/IB", "Using network IB",
# "NCCL_P2P_LEVEL set by environment to NVL", "ncclCommInitRank comm 0x.. - Init START",
# "Setting affinity for GPU 3 to ...", "NVLS multicast support is not available on dev 3",
# "=== System : maxBw 24.0 totalBw 24.0 ===", "CPU/0 (1/1/2)", "+ PCI[24.0] - GPU/1000 (0)",
# "GPU/1000 :GPU/1000 (0/5000.000000/LOC) ...", "Pattern 4, crossNic 0, nChannels 2, ...",
# "Tree 0 : -1 -> 0 -> 1/-1/-1", "Ring 00 : 0 1 2 3", "Trees [0] 1/-1/-1->0->-1",
# "P2P Chunksize set to 131072", "threadThresholds 8/8/64", "2 coll channels, 0 nvls
# channels, 2 p2p channels". Not the error trace "init.cc:1079 -> 2", "Call to connect
# returned ..., retrying", nor a teardown's "Destroy COMPLETE" / "Abort COMPLETE". Read in a
# log's last line only (rule collective_setup has the set-up's end, which the scan keeps).
NCCL_SETUP_LINE = re.compile(
    r"NCCL INFO (?:NCCL version \d|cudaDriverVersion \d|Bootstrap ?: Using |NET/\w+ ?: Using "
    r"|Using network \w|Using non-device net plugin|NCCL_\w+ set by environment to "
    r"|ncclCommInitRank comm 0x[0-9a-f]+ .*Init START|Setting affinity for GPU \d"
    r"|NVLS multicast support is not available|=== System : maxBw"
    r"|(?:CPU|GPU|NIC|NET|PCI|NVS)/[0-9A-Fa-f]+ ?(?:\(|:)|\+ (?:PCI|NVL|NET|SYS|PIX|PXB|PHB)\b"
    r"|Pattern \d+, crossNic|Tree \d+ : |Ring \d+ : (?:\d+ )+|Trees \[\d+\]|P2P Chunksize set to"
    r"|threadThresholds \d|\d+ coll channels, )")


def _log_tails(c: _Ctx) -> list[tuple[str, ScanResult, list[tuple[int | None, str, str]]]]:
    """The last HEARTBEAT_TAIL lines (logread._tail_lines) of the job's first HEARTBEAT_LOGS
    scanned logs, read once for the steps that look at a log's end: (path, scan, lines)."""
    logs = [(t, s) for t, s in zip(c.tasks, c.scans, strict=True) if s is not None]
    return [(t.path, s, _tail_lines(t.path, HEARTBEAT_TAIL, size=65536))
            for t, s in logs[:HEARTBEAT_LOGS]]


def _stops_in_nccl_setup(tails: list[tuple[str, ScanResult, list[tuple[int | None, str, str]]]]
                         ) -> tuple[str, int | None, str] | None:
    """A log (of _log_tails) that stops within CUT_TAIL lines of a line of NCCL's communicator
    set-up (NCCL_SETUP_LINE), no event of the scan after it (a pasted or cut log may end
    mid-line): (its text, its line number, the log)."""
    for path, s, tail in tails:
        for n, body, _raw in reversed(tail[-CUT_TAIL:]):
            if not NCCL_SETUP_LINE.search(body):
                continue
            if n is not None and not any(e.line is not None and e.line > n for e in s.events):
                return body, n, path
            break
    return None


def _heartbeat_tail(c: _Ctx, tails: list[tuple[str, ScanResult, list[tuple[int | None, str,
                                                                           str]]]]
                    ) -> tuple[float, str, str, int | None, str] | None:
    """f10k-: a log whose last lines are only a monitor's periodic lines (the job script's own
    "still running" / status loop, a timed GPU-usage line, a scheduler poll: each with a time of
    its own, at most HEARTBEAT_SHAPES shapes once digits are masked, each repeated over at least
    HEARTBEAT_TICKS ticks on a clock's steady period, none a training count) after the
    program's last line of another shape, the ticks spanning longer than the hang threshold
    (LOG_HANG_S when the job gave none): the program wrote nothing all that time while the job
    went on - a heartbeat that hides the silence from a tap that reads any output. (the span in
    seconds, the program's last line, the last tick, its line number, the log)."""
    for path, _scan, tail in tails:
        year = next((int(m.group(1)) for _, _, r in tail if (m := _ISO_TIME.search(r[:80]))),
                    2000)
        run: list[tuple[float, str]] = []
        shapes: list[str] = []
        before = None
        for _, body, raw in reversed(tail):
            when = _line_time(raw, year)
            shape = _DIGITS.sub("#", body)
            if when is None or _WORK_LINE.search(body) or (
                    shape not in shapes and len(shapes) >= HEARTBEAT_SHAPES):
                before = body
                break
            if shape not in shapes:
                shapes.append(shape)
            run.append((when, shape))
        if before is None or not run:
            continue
        ticks = min(sum(1 for _, sh in run if sh == x) for x in shapes)
        span = max(w for w, _ in run) - min(w for w, _ in run)
        if ticks < HEARTBEAT_TICKS or span < (c.job.hang_threshold_s or LOG_HANG_S):
            continue
        # a timer's ticks: one shape's steps within a quarter of their median (a program's
        # own progress lines come when the work allows, not on a clock)
        at = sorted(w for w, sh in run if sh == shapes[0])
        steps = sorted(b - a for a, b in zip(at, at[1:], strict=False))
        mid = steps[len(steps) // 2]
        if mid <= 0 or any(abs(x - mid) > mid / 4 for x in steps):
            continue
        return span, before, tail[-1][1], tail[-1][0], path
    return None


def _lines_after(e: Event, scan: ScanResult) -> int:
    """Lines of the log after event e's line (by line, not by segment: a CRLF or a `\\r`
    progress bar makes more segments than lines)."""
    if e.line is not None and scan.lines >= e.line:
        return scan.lines - e.line
    return scan.segments - 1 - e.order


def _handled_run(events: list[Event], scan: ScanResult) -> list[Event]:
    """The run of handled failures (a silent marker: "loss is nan, skipping batch") that
    ends a log: at least SKIP_RUN of them on consecutive lines (later ones of the same shape
    extend it: the scanner keeps a repeated shape's first lines and its last), the last within
    CUT_TAIL lines of the end; [] when the loop went on after them."""
    run: list[Event] = []
    for e in events:
        if e.rule.silent and e.role == "marker":
            go_on = run and (e.line == run[-1].line + 1 or len(run) >= SKIP_RUN)
            run = run + [e] if go_on else [e]
        elif e.role in ("root", "marker") and e.rule.id != STOP_RULE and run \
                and e.order > run[-1].order:  # a "stopping" line ends a run, it is no step
            run = []
    if len(run) >= SKIP_RUN and _lines_after(run[-1], scan) < CUT_TAIL:
        return run
    return []


def _abandoned(events: list[Event], scan: ScanResult) -> tuple[Event, Event] | None:
    """(the exception, the line saying the work stopped) when a log ends in an exception
    that a line said ended the work: a logged error ("ERROR epoch 3 failed, giving up") and
    its traceback, or any line saying the work stopped ("evaluation crashed; exiting",
    "worker failed, stopping") next to a printed traceback. The line within FRAME_WINDOW
    lines before the exception or INCIDENT_WINDOW after it, and the later of the two within
    END_TAIL lines of the log's end (no progress after it: a traceback logged and then work
    that went on is survived)."""
    marks = [e for e in events if e.rule.id in (ABANDON_RULE, STOP_RULE)]
    if not marks:
        return None
    for m in reversed(marks):
        # the exception it introduced (or the one it followed)
        after = [e for e in events if m.order < e.order <= m.order + FRAME_WINDOW]
        # (or farther, when only the exception's printed stack lies between: JavaScript,
        # the JVM and Rust print their frames under the message)
        before = [e for e in events if e.role == "root" and m.order > e.order and (
            m.order - e.order <= INCIDENT_WINDOW
            or (m.order - e.order <= FRAME_WINDOW and _stack_under(e, m) > 0))]
        inc, _ = _incident(after)
        if inc is None and before:
            inc, _ = _incident(before)
        if inc is None or inc.cls in SCHEDULER:
            continue
        if m.rule.id == STOP_RULE and not _logged_traceback(events, inc):
            continue
        if _lines_after(max(inc, m, key=lambda e: e.order), scan) < END_TAIL:
            return inc, m
    return None


# a clock time in a log line (ISO date and time, glog's "I0506 17:39:13", a bare HH:MM:SS)
_CLOCK = re.compile(r"(?:\d{4}-\d\d-\d\d[ T]|\b[IWEF]\d{4} )?\b(\d\d?:\d\d:\d\d)\b")


def _where_it_stops(c: _Ctx) -> str:
    """Where the first task log stops, in words: "the log stops at 12:03 after 'Epoch 0 step
    0' (line 10)"; "" when there is no readable log."""
    for t, s in zip(c.tasks, c.scans, strict=True):
        if s is None:
            continue
        tail = _tail_lines(t.path, 6)
        if not tail:
            return "the log is empty"
        n, last, _ = tail[-1]
        clock = next((m.group(1) for _, _, x in reversed(tail) if (m := _CLOCK.search(x))),
                     None)
        at = f" at {clock}" if clock else ""
        line = f"line {n}" if n is not None else "its last line"
        return f"the log stops{at} after {last[:120]!r} ({line}); no error line"
    return ""
