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
"""

from __future__ import annotations

import os
import time

from gpualert_slurm.classify.rules import RuleSet
from gpualert_slurm.classify.scan.grep import NativeError, _scan_range_native
from gpualert_slurm.classify.scan.python import (
    ScanResult,
    _Collector,
    _Handover,
    _Matcher,
    _scan_range,
)

HEAD_BYTES = int(os.environ.get("GPUALERT_SCAN_HEAD_MB", "1024")) << 20
TAIL_BYTES = int(os.environ.get("GPUALERT_SCAN_TAIL_MB", "64")) << 20
BUDGET_S = float(os.environ.get("GPUALERT_SCAN_BUDGET_S", "20"))
HEAD_SHARE = 0.75  # of the budget for the head; the rest reads the end of the file
END_BYTES = 256 << 10  # the end of a file is always read, budget or not (the crash is there)
NATIVE = os.environ.get("GPUALERT_SCAN_NATIVE", "1") != "0"
NATIVE_MIN = int(os.environ.get("GPUALERT_SCAN_NATIVE_MIN", str(1 << 20)))  # smaller: Python
# Python first (python.HANDOVER_SHAPES says until when)
PYTHON_FIRST = os.environ.get("GPUALERT_SCAN_PYTHON_FIRST", "1") != "0"


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
    with open(path, "rb") as f:
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
           deadline=None) -> int:
    """One range of the reading policy: grep finds the candidate lines when it can (see
    _scan_range_native), else Python (_scan_range); a grep failure is logged, noted in
    res.engine, and the range is scanned again in Python."""
    grid = 0
    if NATIVE and res.size >= NATIVE_MIN and not res.engine.startswith("python ("):
        if PYTHON_FIRST:  # repeated line shapes: Python's dedup is cheaper than grep's DFA
            try:
                return _scan_range(f, limit, res, col, matcher, line_base, resync, order_base,
                                   deadline, handover=True)
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



def _mib(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"
