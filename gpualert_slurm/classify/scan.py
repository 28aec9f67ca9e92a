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
        # shapes (digit-normalised lines) known to match nothing: a shape's lines differ only
        # in digit values, so this holds for all of them unless a candidate rule has a digit
        # literal (e.g. "Errno 28")
        self.quiet: set[bytes] = set()
        self.digit_gates = rules.digit_gates[source]
        self.gate_rx = _trie_regex([g for g, _ in self.gates])

    def hits(self, blob: bytes) -> bool:
        low = blob.lower()
        return any(g in low for g, _ in self.gates)

    def can_be_quiet(self, shape: bytes) -> bool:
        low = shape.lower()
        return not any(g in low for g, name in self.gates if name in self.digit_gates)

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


def _trie_regex(words: list[bytes]) -> re.Pattern[bytes]:
    """One regex that finds any of the words, factored as a trie (one pass over the text)."""
    trie: dict = {}
    for w in words:
        d = trie
        for ch in w:
            d = d.setdefault(ch, {})
        d[None] = {}

    def emit(d: dict) -> bytes:
        if None in d:  # a shorter word already matches: longer ones add nothing
            return b""
        alts = [re.escape(bytes([k])) + emit(v) for k, v in sorted(d.items())]
        return alts[0] if len(alts) == 1 else b"(?:" + b"|".join(alts) + b")"

    return re.compile(emit(trie))


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
            order = _scan_range(f, head, res, col, matcher, line_base=0)
            f.seek(res.size - tail)
            res.partial = (
                f"read the first {head >> 20} MiB and the last {tail >> 20} MiB of "
                f"{res.size >> 20} MiB; the middle was skipped"
            )
            # +1 million: events after the jump never join an incident from before it
            _scan_range(f, tail, res, col, matcher, line_base=None, resync=True,
                        order_base=order + 1_000_000)
        else:
            _scan_range(f, None, res, col, matcher, line_base=0)
    col.finish()
    return res


def _scan_range(f, limit, res, col, matcher, line_base, resync=False, order_base=0) -> int:
    """Scan up to `limit` bytes (None: to EOF). line_base None: line numbers unknown.

    Returns the segment counter at the end (events are ordered by it within the file).
    """
    lines = 0  # newlines consumed in this range
    order = order_base
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
    return order


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
    if len(uniq) * 4 > nseg and nseg >= 256:
        # mostly distinct lines (random ids, hashes): dedup does not pay, one regex pass does
        found = _found_by_regex(buf, end, normed, matcher)
        return _emit(found, buf, end, normed, nseg, has_cr, lines, order, line_base, col, path,
                     count)
    if not matcher.hits(b"\n".join(uniq)):
        if count:
            lines += buf.count(b"\n", 0, end) if has_cr else nseg
        return lines, order + nseg
    # locate each occurrence of a segment holding a gate; decode and match only those
    found = []
    quiet = matcher.quiet
    for s in uniq:
        if s in quiet or not matcher.hits(s):
            continue
        matched = False
        for p in _positions(normed, s):
            got = matcher.match(buf[p : p + min(len(s), LINE_CAP)])
            if got is not None:
                found.append((p, got))
                matched = True
            elif not matched and matcher.can_be_quiet(s):
                if len(quiet) > 20000:
                    quiet.clear()
                quiet.add(s)
                break
    return _emit(found, buf, end, normed, nseg, has_cr, lines, order, line_base, col, path,
                 count)


def _found_by_regex(buf: bytes, end: int, normed: bytes, matcher: _Matcher) -> list:
    low = normed[:end].lower()
    found = []
    last = -1
    for m in matcher.gate_rx.finditer(low):
        p = m.start()
        start = low.rfind(b"\n", 0, p) + 1
        if start == last or p - start >= LINE_CAP:
            continue
        last = start
        stop = low.find(b"\n", p)
        got = matcher.match(buf[start : min(stop, start + LINE_CAP)])
        if got is not None:
            found.append((start, got))
    return found


def _emit(found, buf, end, normed, nseg, has_cr, lines, order, line_base, col, path, count):
    """Turn matches (offset, (rule, detail, text)) into events with line numbers."""
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
