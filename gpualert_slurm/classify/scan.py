"""Streaming scan of one log: fixed memory, any size, any bytes.

How it stays fast without running every regex on every line: each chunk is normalised with one
`bytes.translate` (lower case, every digit -> '0', CR -> LF) and split into segments; a training
log is mostly progress lines that differ only in their numbers, so the set of distinct
normalised segments is tiny. Only those distinct segments are checked for the prefilter
substrings ("gates"), and only segments holding a gate are decoded and matched against the
rules that gate can trigger. A log of all-distinct lines degrades to one substring search per
gate over the chunk - slower, never wrong.

Reading policy for huge files (documented in the verdict detail as partial reading): files up to
HEAD_BYTES + TAIL_BYTES are read whole; larger ones are read for their first HEAD_BYTES, then
from the last TAIL_BYTES (where a crash's traceback and Slurm's end-of-job lines are). Line
numbers after the jump are unknown (reported as null). A line longer than LINE_CAP is matched
on its first LINE_CAP bytes; the rest is skipped without being buffered.
"""

from __future__ import annotations

import os
import re
from collections import deque
from dataclasses import dataclass, field

from gpualert_slurm.classify.rules import Rule, RuleSet

CHUNK = 2 << 20
LINE_CAP = 8 << 10
HEAD_BYTES = int(os.environ.get("GPUALERT_SCAN_HEAD_MB", "2048")) << 20
TAIL_BYTES = int(os.environ.get("GPUALERT_SCAN_TAIL_MB", "256")) << 20
KEEP_EVENTS = 200  # first N and last N matched lines are kept per file

_TABLE = bytearray(range(256))
for _c in range(ord("A"), ord("Z") + 1):
    _TABLE[_c] = _c + 32
for _c in range(ord("0"), ord("9") + 1):
    _TABLE[_c] = ord("0")
_TABLE[ord("\r")] = ord("\n")
NORM = bytes(_TABLE)
_STR_NORM = {ord(str(d)): "0" for d in range(10)}

# srun --label ("3: ") and torchrun ("[rank3]: ") prefixes say which rank wrote a line
_LABEL = re.compile(r"^\s*(?:\[rank(\d+)\]:|(\d+): )")


def norm_text(s: str) -> str:
    return s.lower().translate(_STR_NORM)


@dataclass
class Event:
    file: str
    line: int | None
    text: str
    rule: Rule
    detail: str | None
    order: int  # position in the file (segment index), for time order within one log
    label_rank: int | None = None

    @property
    def cls(self) -> str:
        return self.rule.cls

    @property
    def role(self) -> str:
        return self.rule.role

    @property
    def priority(self) -> int:
        return self.rule.priority


@dataclass
class ScanResult:
    path: str
    size: int = 0
    bytes_read: int = 0
    lines: int = 0
    partial: str | None = None
    events: list[Event] = field(default_factory=list)
    dropped: int = 0  # matched lines not kept (beyond KEEP_EVENTS at each end)


class _Matcher:
    """Decides which rule (if any) a line belongs to; caches by the line's bytes."""

    def __init__(self, rules: RuleSet, source: str) -> None:
        self.gates = [(norm_text(g).encode(), g) for g in rules.prefilter[source]]
        self.sgates = [(norm_text(g), g) for g in rules.prefilter[source]]
        self.gate_rules = rules.gate_rules[source]
        self.context = [r for r in rules.for_source(source) if r.role == "context"]
        self.cache: dict[bytes, tuple[Rule, str | None] | None] = {}

    def hits(self, blob: bytes) -> bool:
        return any(g in blob for g, _ in self.gates)

    def match(self, raw: bytes) -> tuple[Rule, str | None, str] | None:
        if raw in self.cache:
            got = self.cache[raw]
            return None if got is None else (*got, _decode(raw))
        text = _decode(raw)
        low = norm_text(text)
        cands: list[Rule] = []
        for g, name in self.sgates:
            if g in low:
                for r in self.gate_rules[name]:
                    if r not in cands:
                        cands.append(r)
        best: tuple[Rule, str | None] | None = None
        if cands:
            for r in cands + self.context:
                if best is not None and r.priority <= best[0].priority:
                    continue
                m = r.match(text)
                if m:
                    det = m.groupdict().get("detail") if m.re.groupindex else None
                    best = (r, det)
            if best is not None and best[0].role == "context":
                best = None
        if len(self.cache) > 4096:
            self.cache.clear()
        self.cache[raw] = best
        return None if best is None else (*best, text)


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").rstrip()


class _Collector:
    def __init__(self, res: ScanResult) -> None:
        self.res = res
        self.tail: deque[Event] = deque(maxlen=KEEP_EVENTS)

    def add(self, ev: Event) -> None:
        if len(self.res.events) < KEEP_EVENTS:
            self.res.events.append(ev)
        else:
            if len(self.tail) == self.tail.maxlen:
                self.res.dropped += 1
            self.tail.append(ev)

    def finish(self) -> None:
        self.res.events.extend(self.tail)


def scan_file(
    path: str,
    rules: RuleSet,
    source: str = "log",
    head_bytes: int | None = None,
    tail_bytes: int | None = None,
) -> ScanResult:
    """Scan one file; raises OSError if it cannot be read."""
    head = HEAD_BYTES if head_bytes is None else head_bytes
    tail = TAIL_BYTES if tail_bytes is None else tail_bytes
    matcher = _Matcher(rules, source)
    res = ScanResult(path=path)
    col = _Collector(res)
    with open(path, "rb") as f:
        res.size = os.fstat(f.fileno()).st_size
        if res.size > head + tail:
            _scan_range(f, head, res, col, matcher, line_base=0)
            f.seek(res.size - tail)
            res.partial = (
                f"read the first {head >> 20} MiB and the last {tail >> 20} MiB of "
                f"{res.size >> 20} MiB; the middle was skipped"
            )
            _scan_range(f, tail, res, col, matcher, line_base=None, resync=True)
        else:
            _scan_range(f, None, res, col, matcher, line_base=0)
    col.finish()
    return res


def _scan_range(f, limit, res, col, matcher, line_base, resync=False) -> None:  # noqa: C901
    """Scan up to `limit` bytes (None: to EOF). line_base None: line numbers unknown."""
    lines = 0  # newlines consumed in this range
    order_base = res.events[-1].order + 1 if res.events else 0
    order = order_base  # segment counter, orders events within the file
    carry = b""
    skipping = resync  # after a seek we are mid-line: drop up to the first newline
    left = limit
    while left is None or left > 0:
        n = CHUNK if left is None else min(CHUNK, left)
        chunk = f.read(n)
        if not chunk:
            break
        res.bytes_read += len(chunk)
        if left is not None:
            left -= len(chunk)
        if skipping:
            cut = _first_sep(chunk)
            if cut < 0:
                continue
            lines += chunk.count(b"\n", 0, cut + 1)
            chunk = chunk[cut + 1 :]
            skipping = False
        buf = carry + chunk if carry else chunk
        end = max(buf.rfind(b"\n"), buf.rfind(b"\r")) + 1
        if end:
            lines, order = _scan_body(buf, end, lines, order, line_base, col, matcher, res.path)
        rest = buf[end:]
        if len(rest) > LINE_CAP:
            # a line without end in sight: match its first LINE_CAP bytes, skip the rest
            lines, order = _scan_body(rest[:LINE_CAP] + b"\n", LINE_CAP + 1, lines, order,
                                      line_base, col, matcher, res.path, count=False)
            carry = b""
            skipping = True
        else:
            carry = rest
    if carry and not skipping:
        lines, order = _scan_body(carry + b"\n", len(carry) + 1, lines, order, line_base, col,
                                  matcher, res.path)
    elif skipping:
        lines += 1
    if line_base is not None:
        res.lines += lines


def _first_sep(b: bytes) -> int:
    a, c = b.find(b"\n"), b.find(b"\r")
    if a < 0:
        return c
    return a if c < 0 else min(a, c)


def _scan_body(buf, end, lines, order, line_base, col, matcher, path, count=True):
    """Scan buf[:end] (end is just past a separator). Returns updated (lines, order)."""
    normed = buf.translate(NORM)
    segs = normed.split(b"\n")
    segs.pop()  # the unfinished segment after the last separator is not ours
    nseg = len(segs)
    uniq = set(segs)
    del segs
    has_cr = buf.find(b"\r", 0, end) >= 0
    if not matcher.hits(b"\n".join(uniq)):
        if count:
            lines += buf.count(b"\n", 0, end) if has_cr else nseg
        return lines, order + nseg
    # locate each occurrence of a segment holding a gate; decode and match only those
    found = []
    for s in uniq:
        if matcher.hits(s):
            for p in _positions(normed, s):
                got = matcher.match(buf[p : p + min(len(s), LINE_CAP)])
                if got is not None:
                    found.append((p, got))
    found.sort(key=lambda x: x[0])
    at = seg = 0
    for p, (rule, detail, text) in found:
        k = normed.count(b"\n", at, p)
        seg += k
        lines += buf.count(b"\n", at, p) if has_cr else k
        at = p
        lineno = None if line_base is None else line_base + lines + 1
        m = _LABEL.match(text)
        rank = int(m.group(1) or m.group(2)) if m else None
        col.add(Event(path, lineno, text[:500], rule, detail, order + seg, rank))
    if count:
        lines += buf.count(b"\n", at, end) if has_cr else nseg - seg
    return lines, order + nseg


def _positions(normed: bytes, s: bytes):
    """Start offsets of the whole segments equal to s (each ends with a newline)."""
    if normed.startswith(s + b"\n"):
        yield 0
    needle = b"\n" + s + b"\n"
    p = normed.find(needle)
    while p != -1:
        yield p + 1
        p = normed.find(needle, p + len(s) + 1)
