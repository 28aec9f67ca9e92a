"""scan_file: the reading policy over one log, and which engine reads each range.

Reading policy (reported in the verdict detail as partial reading): a file is read from the
start for at most HEAD_BYTES (1 GiB) and at most HEAD_SHARE of BUDGET_S (20 s); then reading
jumps to the end (where a crash's traceback and Slurm's end-of-job lines are): the last
TAIL_BYTES (64 MiB), or less when the rest of the budget would not read that much at the speed
measured so far, and the middle is skipped. The whole scan takes BUDGET_S plus at most one slow
chunk (or grep block) and the file's last END_BYTES (256 KiB), which are always read. Line
numbers after a jump or a budget stop are unknown (null).

Engines (_range): a file of at least NATIVE_MIN bytes is searched by grep (grep.py), smaller
ones by Python (python.py). Python first (PYTHON_FIRST): even in such a file each range is read
by the Python path while its chunks hold few distinct line shapes (ordinary training output: a
handful per 2 MiB), since its dedup costs less than grep's automaton and pipe (about 2 against
3.5-4 CPU-s per GiB on the benchmark's training log); from the first chunk of many shapes on,
grep reads the rest of the range on the same chunk grid (python._Handover): the events are
those of either path alone (tests/test_scan_native.py). When grep is missing or fails, the
range is scanned in Python, ScanResult.engine says so and a warning is logged;
GPUALERT_SCAN_NATIVE=0 turns grep off.

Pieces (PARALLEL): a range of at least grep.SPLIT_MIN bytes read Python first is cut on its
chunk grid into up to grep.WORKERS pieces (one per CPU, at most 4, as grep's own pieces), and
each piece after the first is read by a forked child of this process while this process reads
the first; a child sends back its events, counts and where it stopped (one pickle over a pipe),
which are shifted by the pieces before it. Cut on the grid (each piece starts where the whole
range's scan would start that chunk's lines), the pieces' chunks are the whole scan's, so are
the events (tests/test_scan_pieces.py). In a piece, a handover to grep is that piece's, with one
grep. What the CPython builtins over every byte cost (translate, split, the set of shapes:
about 2.3 ns a byte) is what bounds one process; pieces trade some CPU (page-cache copies, a
fork) for wall time. A child that fails or sends nothing usable: its piece is read here, after
the others. When the time budget stops a piece early, the pieces after it are dropped, as
grep's are. GPUALERT_SCAN_PARALLEL=0: one process.
"""

from __future__ import annotations

import os
import time

from gpualert_slurm.classify.rules import RuleSet
from gpualert_slurm.classify.scan import grep as _grep
from gpualert_slurm.classify.scan.grep import NativeError, _scan_range_native
from gpualert_slurm.classify.scan.lines import LINE_CAP, _last_sep
from gpualert_slurm.classify.scan.python import (
    CHUNK,
    Event,
    ScanResult,
    _Collector,
    _few_shapes,
    _Handover,
    _Matcher,
    _scan_body,
    _scan_range,
)
from gpualert_slurm.core.spool import open_log

HEAD_BYTES = int(os.environ.get("GPUALERT_SCAN_HEAD_MB", "1024")) << 20
TAIL_BYTES = int(os.environ.get("GPUALERT_SCAN_TAIL_MB", "64")) << 20
BUDGET_S = float(os.environ.get("GPUALERT_SCAN_BUDGET_S", "20"))
HEAD_SHARE = 0.75  # of the budget for the head; the rest reads the end of the file
END_BYTES = 256 << 10  # the end of a file is always read, budget or not (the crash is there)
NATIVE = os.environ.get("GPUALERT_SCAN_NATIVE", "1") != "0"
NATIVE_MIN = int(os.environ.get("GPUALERT_SCAN_NATIVE_MIN", str(1 << 20)))  # smaller: Python
# Python first (python.HANDOVER_SHAPES says until when)
PYTHON_FIRST = os.environ.get("GPUALERT_SCAN_PYTHON_FIRST", "1") != "0"
# a Python-first range cut in pieces read by forked children (see the module's docstring)
PARALLEL = os.environ.get("GPUALERT_SCAN_PARALLEL", "1") != "0"


def scan_file(
    path: str,
    rules: RuleSet,
    source: str = "log",
    head_bytes: int | None = None,
    tail_bytes: int | None = None,
    budget_s: float | None = None,
) -> ScanResult:
    """Scan one file; raises OSError if it cannot be read."""
    head = HEAD_BYTES if head_bytes is None else head_bytes
    tail = TAIL_BYTES if tail_bytes is None else tail_bytes
    budget = BUDGET_S if budget_s is None else budget_s
    matcher = _Matcher(rules, source)
    res = ScanResult(path=path)
    col = _Collector(res)
    t0 = time.monotonic()
    with open_log(path) as f:
        res.size = os.fstat(f.fileno()).st_size
        limit = head if res.size > head + tail else None
        # the budget is a real bound: the head gets HEAD_SHARE of it, the tail the rest
        order = _range(f, limit, res, col, matcher, line_base=0,
                            deadline=t0 + budget * HEAD_SHARE)
        pos = f.tell()
        if pos < res.size:
            why = (f"after {pos >> 20} MiB the time budget of {budget:g} s was used up"
                   if limit is None or pos < head else f"the first {head >> 20} MiB were read")
            # read no more of the tail than the rest of the budget allows at the speed so far
            left_s = max(0.0, t0 + budget - time.monotonic())
            rate = res.bytes_read / max(time.monotonic() - t0, 1e-3)
            want = min(tail, res.size - pos, max(int(rate * left_s * 0.8), 1 << 16))
            start = res.size - want
            if start > pos:
                f.seek(start)
                res.partial = (f"{why}; then the last {_mib(want)} of {_mib(res.size)} were "
                               "read, the middle was skipped")
            else:  # what is left is no more than the tail: finish it within the budget
                res.partial = f"{why}; line numbers after that point are unknown"
            # +1 million: events after the jump never join an incident from before it
            order = _range(f, None, res, col, matcher, line_base=None, resync=True,
                                order_base=order + 1_000_000, deadline=t0 + budget)
            if f.tell() < res.size - END_BYTES:
                # slower than measured (a busy machine): the file's very end is read anyway
                f.seek(res.size - END_BYTES)
                order = _range(f, None, res, col, matcher, line_base=None, resync=True,
                                    order_base=order + 1_000_000)
                res.partial += (f"; the budget ran out in the tail, so only the last "
                                f"{_mib(END_BYTES)} were read after it")
            elif f.tell() < res.size:  # no more than END_BYTES left: finish them
                order = _range(f, None, res, col, matcher, line_base=None, resync=True,
                                    order_base=order)
        res.segments = order
    col.finish()
    return res


def _range(f, limit, res, col, matcher, line_base, resync=False, order_base=0,
           deadline=None, lead=0, split=True) -> int:
    """One range of the reading policy: grep finds the candidate lines when it can (see
    _scan_range_native), else Python (_scan_range); a grep failure is logged, noted in
    res.engine, and the range is scanned again in Python. A long range read Python first is
    read in pieces at once (_pieces); `split` False: not (a piece itself); `lead`: see
    python._scan_range."""
    grid = 0
    if NATIVE and res.size >= NATIVE_MIN and not res.engine.startswith("python ("):
        if PYTHON_FIRST:  # repeated line shapes: Python's dedup is cheaper than grep's DFA
            if split and PARALLEL and not resync and _grep.WORKERS > 1:
                cuts = _pieces(f, limit, matcher, res.path, deadline)
                if cuts:
                    return _range_pieces(f, limit, res, col, matcher, line_base, order_base,
                                         deadline, cuts)
            try:
                return _scan_range(f, limit, res, col, matcher, line_base, resync, order_base,
                                   deadline, handover=True, lead=lead)
            except _Handover as h:  # shapes too many: the rest of the range goes to grep
                limit, line_base, resync, order_base, grid = h.limit, h.line_base, False, \
                    h.order, h.grid
        at, got = f.tell(), res.bytes_read
        try:
            order = _scan_range_native(f, limit, res, col, matcher, line_base, resync,
                                       order_base, deadline, grid)
            res.engine = "grep"
            return order
        except NativeError as e:
            res.engine = f"python (grep failed: {e})"
            import logging

            logging.getLogger(__package__).warning("gpualert scan of %s: %s; scanning it in Python",
                                                res.path, e)
            f.seek(at)
            res.bytes_read = got
    return _scan_range(f, limit, res, col, matcher, line_base, resync, order_base, deadline)



def _pieces(f, limit: int | None, matcher: _Matcher | None = None, path: str = "",
            deadline: float | None = None) -> list[tuple[int, int]]:
    """Where a range from f's position is cut for its pieces: (start, lead) of each piece
    after the first. A cut is near each 1/n-th of the range, on its chunk grid (a multiple of
    CHUNK from its start), at the start of the line that ends first past that grid line - where
    the whole range's scan would start that chunk's lines - `lead` bytes before it; n such that
    each piece holds at least grep.SPLIT_MIN / 2 bytes. No line end within LINE_CAP before a
    grid line (the whole scan would be skipping a long line there): no cut there. No cut at
    all when the range's first chunk is not one of few line shapes (python._few_shapes): the
    Python path would hand it to grep, which cuts its own pieces. With `matcher`, none either
    when the first chunk, read at once (events thrown away), says the pieces would not all end
    before `deadline`: the budget would stop the first, and what the others read would be
    dropped (a log of many matched lines, read at tens of MB/s, costs the same time in pieces
    and twice the CPU)."""
    fd = f.fileno()
    start = f.tell()
    size = os.fstat(fd).st_size
    stop = size if limit is None else min(start + limit, size)
    span = stop - start
    split_min = _grep.SPLIT_MIN
    n = min(_grep.WORKERS, span // max(1, split_min // 2)) if split_min > 0 else _grep.WORKERS
    if n < 2:
        return []
    first = os.pread(fd, min(CHUNK, span), start)
    if not _few_shapes(first):
        return []
    if matcher is not None and deadline is not None:
        end = _last_sep(first) + 1
        t0 = time.monotonic()
        try:
            _scan_body(first, end, 0, 0, None, _Collector(ScanResult(path=path)), matcher, path,
                       count=False, handover=True)
        except _Handover:
            return []
        now = time.monotonic()
        if now + (now - t0) * span / max(end, 1) / n * 1.25 > deadline:
            return []
    cuts: list[tuple[int, int]] = []
    for k in range(1, n):
        grid = start + span * k // n // CHUNK * CHUNK
        last = cuts[-1][0] if cuts else start
        if grid <= last or grid >= stop:
            continue
        low = max(start, grid - LINE_CAP)
        back = os.pread(fd, grid - low, low)
        sep = _last_sep(back)
        if sep < 0 or len(back) != grid - low:
            continue
        at = low + sep + 1
        if at > last:
            cuts.append((at, grid - at))
    return cuts


def _range_pieces(f, limit, res, col, matcher, line_base, order_base, deadline,
                  cuts: list[tuple[int, int]]) -> int:
    """_range over pieces: the first read here, each other one by a forked child at the same
    time (see the module's docstring); the same events, counts and file position as one
    process's scan."""
    import pickle
    import signal

    start = f.tell()
    stop = None if limit is None else start + limit
    bounds = [start] + [at for at, _ in cuts]
    leads = [0] + [lead for _, lead in cuts]
    ends: list[int | None] = [*bounds[1:], stop]
    rules = matcher._rules.rules
    rule_ids = {id(r): i for i, r in enumerate(rules)}
    kids: list[tuple[int, int]] = []  # (pid, read end of its pipe); (0, -1): reaped
    workers = _grep.WORKERS
    me = os.getpid()
    try:
        for k in range(1, len(bounds)):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: its piece, then its result, then gone
                code = 1
                try:
                    _die_with(me)
                    os.close(r)
                    _grep.WORKERS = 1
                    # a file description of its own: f's offset is shared with the parent
                    with open_log(f"/proc/self/fd/{f.fileno()}") as own:
                        piece = _read_piece(own, bounds[k], ends[k], leads[k], res, matcher,
                                            line_base is not None, deadline, rule_ids)
                    with os.fdopen(w, "wb") as out:
                        pickle.dump(piece, out, protocol=pickle.HIGHEST_PROTOCOL)
                    code = 0
                finally:
                    os._exit(code)
            os.close(w)
            kids.append((pid, r))
        _grep.WORKERS = 1  # the first piece's handover, if any: one grep beside the children
        lines_before = res.lines
        order = _range(f, ends[0] - start, res, col, matcher, line_base, False, order_base,
                       deadline, split=False)
        _grep.WORKERS = workers
        stopped = f.tell() < ends[0]  # the budget stopped it: the pieces after it are dropped
        for k, (pid, r) in enumerate(kids, start=1):
            with os.fdopen(r, "rb") as src:
                kids[k - 1] = (pid, -1)
                try:
                    piece = pickle.load(src)
                except Exception:  # noqa: BLE001  (nothing usable: the piece is read here)
                    piece = None
            _, status = os.waitpid(pid, 0)
            kids[k - 1] = (0, -1)
            if stopped:
                continue
            base = None if line_base is None else line_base + res.lines - lines_before
            if piece is None or status != 0:
                f.seek(bounds[k])
                order = _range(f, None if ends[k] is None else ends[k] - bounds[k], res, col,
                               matcher, base, False, order, deadline, lead=leads[k],
                               split=False)
                stopped = ends[k] is not None and f.tell() < ends[k]
                continue
            segs, read, lines, engine, pos, dropped, events = piece
            for ev in events:
                col.add(Event(res.path, None if base is None or ev[0] is None else base + ev[0],
                              ev[1], rules[ev[2]], ev[3], order + ev[4], *ev[5:]))
            res.dropped += dropped
            res.bytes_read += read
            if line_base is not None:
                res.lines += lines
            if engine != "python" and not res.engine.startswith("python ("):
                res.engine = engine
            order += segs
            f.seek(pos)
            stopped = ends[k] is not None and pos < ends[k]
        return order
    finally:
        _grep.WORKERS = workers
        for pid, r in kids:
            if r >= 0:
                os.close(r)
            if pid:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)


def _die_with(parent: int) -> None:
    """A piece's child ends with the process that forked it (a hook's watchdog kills its
    classifier, not the classifier's children): PR_SET_PDEATHSIG, then whether it is already
    gone. Best effort: without it a child still ends at the reading's deadline."""
    import contextlib
    import signal

    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def _read_piece(f, at: int, end: int | None, lead: int, parent: ScanResult, matcher: _Matcher,
                numbered: bool, deadline: float | None, rule_ids: dict[int, int]) -> tuple:
    """In a child: read one piece as a range of its own (numbered from 0, ordered from 0);
    what its parent needs of it, as plain values (a rule by its index in the rule set)."""
    res = ScanResult(path=parent.path, size=parent.size, engine=parent.engine)
    col = _Collector(res)
    f.seek(at)
    segs = _range(f, None if end is None else end - at, res, col, matcher,
                  0 if numbered else None, False, 0, deadline, lead=lead, split=False)
    col.finish()
    events = [(e.line, e.text, rule_ids[id(e.rule)], e.detail, e.order, e.task_label,
               e.rank_label, e.local_label, e.indented, e.ref_rank, e.ref_node)
              for e in res.events]
    return segs, res.bytes_read, res.lines, res.engine, f.tell(), res.dropped, events


def _mib(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"
