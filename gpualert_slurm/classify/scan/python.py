"""The rule matcher and the Python path over a range of a log.

The Python path (smaller files, and the fallback): each chunk is normalised with one
`bytes.translate` (every digit -> '0', CR -> LF; lines.NORM) and split into segments; a training
log is mostly progress lines that differ only in their numbers, so the set of distinct normalised
segments ("shapes") is tiny. Hex ids (NCCL's comm addresses and bus ids, hashes) would make
each line its own shape: shapes are grouped by their hex key (lines.hex_keys), and a key's lines
are one shape where the rules cannot tell its ids apart (_Matcher.hex_uniform, by rewriting each
candidate pattern to read an id's characters as "any hex digit"), else each keeps its own.
Only the distinct shapes are checked for the prefilter substrings
("gates", case-insensitive), and only lines holding a gate are decoded; a shape that matched
nothing is remembered as quiet. A chunk of mostly distinct lines (random ids, NCCL_DEBUG=INFO
pointers) is searched instead for the rules' own literals (one literal-prefixed regex per first
character), so that a line holding only a gate word ("error rate 0.1") costs nothing in Python.
Either way, per chunk a repeated line shape is matched on its first REPEAT_KEEP lines and its
last one (_pick), so both searches and grep's give the same events.

Read first even where grep could (reading.PYTHON_FIRST): at the first chunk of more than
HANDOVER_SHAPES shapes, or of more than HANDOVER_MISSES lines matched in vain, the Python path
stops at that chunk's first line, before any of the chunk's events (_Handover), and grep reads
the rest of the range on the same chunk grid.
"""

from __future__ import annotations

import functools
import os
import re
import time
from collections import deque
from dataclasses import dataclass, field

from gpualert_slurm.classify.rules import Rule, RuleSet, norm_text
from gpualert_slurm.classify.scan.blind import _HEXCH, _X, _Y, _digit_blind, _exposed, _marks_rx
from gpualert_slurm.classify.scan.lines import (
    _PREFIX_RX,
    HEX_MARK,
    LINE_CAP,
    NORM,
    LineView,
    _capped,
    _decode,
    _first_sep,
    _last_sep,
    _roll,
    clean_text,
    hex_key,
    hex_keys,
    line_view,
)

CHUNK = 2 << 20
MIN_CHUNK = 64 << 10
SLOW_CHUNK_S = 0.1  # a chunk that took longer halves the next: the budget overshoots little
KEEP_EVENTS = 200  # first N and last N matched lines are kept per file
REPEAT_KEEP = 3  # occurrences of one repeated line shape matched per chunk (+ its last one)
# Python first, grep from the first chunk of more than HANDOVER_SHAPES distinct line shapes on:
# ordinary training output is a few shapes per chunk (digits normalised), which Python's dedup
# reads at about 2.3 CPU-s per GiB, where grep's automaton over the rules' ~1000 EREs, fed
# through its pipe, took 4 (bench_classify's ordinary log); each distinct shape costs Python
# some 20 us (the gates), so past a few hundred per 2 MiB chunk grep is the cheaper
HANDOVER_SHAPES = int(os.environ.get("GPUALERT_SCAN_HANDOVER_SHAPES", "512"))
HANDOVER_MISSES = 256  # lines of a chunk matched in vain (shapes that cannot be quiet): grep's then


@dataclass
class Event:
    file: str
    line: int | None
    text: str
    rule: Rule
    detail: str | None
    order: int  # position in the file (segment index), for time order within one log
    task_label: int | None = None  # srun --label / OpenMPI tag: the Slurm task
    rank_label: int | None = None  # torch's [rankN]: the global rank
    local_label: int | None = None  # torchrun --tee's [defaultN]: a local rank
    indented: bool = False
    ref_rank: int | None = None  # a rank / node the line names (srun's "n2: task 1: ...")
    ref_node: str | None = None

    @property
    def label_rank(self) -> int | None:
        return self.rank_label if self.rank_label is not None else self.task_label

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
    segments: int = 0  # line order at the end of the file (Event.order scale)
    partial: str | None = None
    # how candidate lines were found: "grep", "python", or "python (grep failed: why)"
    engine: str = "python"
    events: list[Event] = field(default_factory=list)
    dropped: int = 0  # matched lines not kept (beyond KEEP_EVENTS at each end)



class _Matcher:
    """Decides which rule (if any) a line belongs to; caches by the line's bytes."""

    def __init__(self, rules: RuleSet, source: str) -> None:
        self.gates = [(norm_text(g).encode(), g) for g in rules.prefilter[source]]
        self._rules, self._source = rules, source  # literal_rx / literal_scans: when needed
        self.literal_rules = rules.literal_rules[source]
        order = {id(r): i for i, r in enumerate(rules.rules)}
        self.rank = lambda r: (-r.priority, order[id(r)])
        self.cache: dict[bytes, tuple[Rule, str | None] | None] = {}
        # shapes (digit-normalised lines) known to match nothing: a shape's lines differ only
        # in digit values, so this holds for all of them unless a candidate rule has a digit
        # literal (e.g. "Errno 28")
        self.quiet: set[bytes] = set()
        self.uniform: dict[bytes, bool] = {}  # shape -> digit_uniform() of a line of it
        self.hexu: dict[bytes, bool] = {}  # hex key -> hex_uniform()
        self.digit_gates = rules.digit_gates[source]
        self.native_patterns: list[bytes] | bool = False  # grep's, built on first use
        self.rules = rules.scanned(source)

    @functools.cached_property
    def literal_rx(self) -> re.Pattern[str]:
        """The regex finding the rule literals in a line (RuleSet.literal_src), compiled when
        a line first holds a gate."""
        return self._rules.literal_regex(self._source)

    @functools.cached_property
    def literal_scans(self) -> list[re.Pattern[bytes]]:
        """The literal regexes over a chunk's bytes (RuleSet.literal_scan_src), compiled when
        a chunk of mostly distinct lines first needs them."""
        return self._rules.literal_scans(self._source)

    def hits(self, blob: bytes) -> bool:
        low = blob.lower()
        return any(g in low for g, _ in self.gates)

    def can_be_quiet(self, shape: bytes, raw: bytes | None = None) -> bool:
        """Whether every line of this shape gets from match() what its other lines get (so
        that a few of them stand for all): no gate of a rule with a digit literal is in it;
        or, given `raw` (a line of the shape), digit_uniform(raw)."""
        low = shape.lower()
        if not any(g in low for g, name in self.gates if name in self.digit_gates):
            return True
        if raw is None or len(shape) > 1024:
            return False
        known = self.uniform.get(shape)
        if known is None:
            if len(self.uniform) >= 20000:  # bounded memory, as the quiet shapes
                self.uniform.clear()
            known = self.uniform[shape] = self.digit_uniform(raw)
        return known

    def digit_uniform(self, raw: bytes) -> bool:
        """Whether every line of raw's shape (its bytes but for the digits' values) gets from
        match() what raw gets: each pattern match() would try on them (those of the rules
        whose literals it holds: the same for all) reads no digit value, or, made blind to
        digit values (_digit_blind), finds nothing in raw. A progress line holding "loss"
        beside a rule reading "loss=nan(0x7ff...)" is then quiet, not matched again on each
        of its lines."""
        if len(raw) > LINE_CAP:
            return False
        cleaned = clean_text(_decode(raw))
        hits: dict[Rule, set[int]] = {}
        for m in self.literal_rx.finditer(norm_text(cleaned) + "\n"):
            for r, idx in self.literal_rules[m.group(1)]:
                hits.setdefault(r, set()).update(idx)
        body = line_view(cleaned, cleaned=True).body.lstrip()
        for r, idx in hits.items():
            for i in idx:
                blind = _digit_blind(r.patterns.sources[i])
                if blind is None or (blind[1] and blind[0].search(body)):
                    return False
        return True

    @functools.cached_property
    def _exposed_rx(self) -> re.Pattern[str] | None:
        """The rule literals that could overlap a hex id (_exposed), each as a regex that
        reads _X as any hex digit and must cover one _X (lines.HEX_MARK's places)."""
        alts = []
        for lit in self.literal_rules:
            if _exposed(lit):
                body = "".join(f"[{c}{_X}]" if c in _HEXCH else re.escape(c) for c in lit)
                alts.append(f"(?=.{{0,{len(lit) - 1}}}{_X}){body}")
        return re.compile("|".join(alts), re.DOTALL) if alts else None

    def hex_uniform(self, key: bytes, raw: bytes) -> bool:
        """Whether every line of this hex key (lines.hex_keys: its shape with each hex id
        marked) gets from match() what raw, one of them, gets: the same rule or none."""
        known = self.hexu.get(key)
        if known is None:
            if len(self.hexu) >= 20000:  # bounded memory, as the quiet shapes
                self.hexu.clear()
            known = self.hexu[key] = self._hex_uniform(key, raw)
        return known

    def _hex_uniform(self, key: bytes, raw: bytes) -> bool:
        # what clean_text changes, non-ASCII and long lines: not judged (their lines are matched
        # by their digit shapes)
        if (len(raw) > 1024 or len(raw) != len(key) or not raw.isascii()
                or any(c < 32 and c != 9 for c in raw) or any(c in raw for c in b"\\*`\x7f")):
            return False
        text = raw.decode("ascii").rstrip()
        view = line_view(text, cleaned=True)
        start = len(text) - len(view.body)  # where the prefixes line_view removed end
        ids = [i for i in range(len(text)) if key[i] == HEX_MARK]
        if not ids or ids[0] < start or _PREFIX_RX.match(view.body) is not None:
            return False
        chars = list(text)
        for i in ids:
            chars[i] = _X
        marked_x = "".join(chars)
        # no id could make line_view remove more: the prefixes, "may" match, do not match
        may_prefix = _marks_rx(_PREFIX_RX.pattern, False)
        if may_prefix is None or may_prefix.match(marked_x, start) is not None:
            return False
        # no rule literal could overlap an id: the same rules are tried on every line
        pre = norm_text(text) + "\n"
        normed = list(pre)
        for i in ids:
            normed[i] = _X
        if self._exposed_rx is not None and self._exposed_rx.search("".join(normed)):
            return False
        hits: dict[Rule, set[int]] = {}
        for m in self.literal_rx.finditer(pre):
            for r, idx in self.literal_rules[m.group(1)]:
                hits.setdefault(r, set()).update(idx)
        for i, c in enumerate(chars):
            if c.isdigit():
                chars[i] = _Y
        body = "".join(chars)[start:].lstrip()
        for r in sorted(hits, key=self.rank):  # as match(): the first that matches decides
            every, none = False, True
            for i in sorted(hits[r]):
                src = r.patterns.sources[i]
                must, may = _marks_rx(src, True), _marks_rx(src, False)
                if must is not None and must.search(body):
                    every = True
                    break
                if may is None or may.search(body):
                    none = False
            if every:
                return True  # every line of the key matches this rule: it decides for all
            if not none:
                return False  # some lines may match it and some may not
        return True

    def match(self, raw: bytes) -> tuple[Rule, str | None, str, Hit] | None:
        if len(raw) > LINE_CAP:  # a long line, _capped: its start, else its end
            got = self.match(raw[:LINE_CAP])
            if got is None:  # its end, without the NULs of a hole before it
                got = self.match(raw[LINE_CAP:][-LINE_CAP:].replace(b"\0", b""))
                if got is not None and len(got[2]) > 500:  # events keep 500: the end matched
                    got = (got[0], got[1], "\u2026" + got[2][-499:], got[3])
            return got
        if raw in self.cache:
            got = self.cache[raw]
            return None if got is None else (got[0], got[1], _decode(raw), got[2])
        text = _decode(raw)
        # the rules whose literals are in the line (one regex); most lines stop here
        # "\n": the line's end, which some literals hold ("error\n": an exception line)
        cleaned = clean_text(text)
        pre = norm_text(cleaned) + "\n"
        hits: dict[Rule, set[int]] = {}
        for m in self.literal_rx.finditer(pre):
            for r, idx in self.literal_rules[m.group(1)]:
                hits.setdefault(r, set()).update(idx)
        best: tuple[Rule, str | None, Hit] | None = None
        if hits:
            view = line_view(cleaned, cleaned=True)
            body = view.body.lstrip()
            # the highest priority wins (on a tie, the rule read first: rules/*.yaml)
            for r in sorted(hits, key=self.rank):
                if best is not None:
                    break
                m = r.match(body, hits.get(r))
                if m:
                    groups = m.groupdict() if m.re.groupindex else {}
                    det = groups.get("detail") or r.detail
                    ref = groups.get("rank")
                    best = (r, det, Hit(view, int(ref) if ref and ref.isdigit() else None,
                                        groups.get("node")))
            if best is not None and best[0].role == "context":
                best = None
        if len(raw) <= 1024:  # bounded memory: at most 4096 short lines are remembered
            if len(self.cache) >= 4096:
                self.cache.clear()
            self.cache[raw] = best
        return None if best is None else (best[0], best[1], text, best[2])


@dataclass
class Hit:
    view: LineView
    ref_rank: int | None
    ref_node: str | None



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


class _Handover(Exception):  # noqa: N818  (not an error: control flow, caught by _range)
    """_scan_range met a chunk of more than HANDOVER_SHAPES distinct line shapes: it stopped
    at that chunk's first line (file positioned there, its bytes not counted as read) and
    hands the rest of the range to grep."""

    def __init__(self, order: int, line_base: int | None, limit: int | None, grid: int) -> None:
        super().__init__()
        self.order, self.line_base, self.limit, self.grid = order, line_base, limit, grid



def _scan_range(f, limit, res, col, matcher, line_base, resync=False, order_base=0,
                deadline=None, handover=False, lead=0) -> int:
    """Scan up to `limit` bytes (None: to EOF), stopping at a line end once past `deadline`.

    line_base None: line numbers unknown. `handover`: raise _Handover at a chunk of more
    than HANDOVER_SHAPES distinct line shapes (grep is then faster than Python). `lead`: the
    range is a piece of a longer one cut on its chunk grid (reading._pieces), starting `lead`
    bytes before a grid line: its first chunk is those bytes (what the whole range's scan
    would carry) and a whole chunk, so its chunks, hence its events, are the whole range's.

    Returns the segment counter at the end (events are ordered by it within the file).
    """
    origin = f.tell() + lead  # where the chunk grid starts (grep's, after a handover, too)
    lines = 0  # newlines consumed in this range
    order = order_base
    carry = b""
    skipping = resync  # after a seek we are mid-line: drop up to the first newline
    long_head: bytes | None = None  # skipping a long line: its first LINE_CAP bytes
    tail = b""  # ... and the last LINE_CAP bytes skipped so far (matched at its end)
    left = limit
    size = CHUNK  # shrinks when a chunk is slow (candidate-rich lines), so the deadline holds
    fd, pos = f.fileno(), origin - lead  # pos: the next byte to read (f is sought there at
    while left is None or left > 0:  # the end)
        n = size + lead if left is None else min(size + lead, left)
        lead = 0
        t_chunk = time.monotonic()
        chunk: bytes | None = None
        if carry:  # the unfinished line is read again with the chunk: no 2 MiB copy to join
            buf = os.pread(fd, len(carry) + n, pos - len(carry))
            if not buf.startswith(carry):  # the file changed under us: what was read counts
                buf = carry + os.pread(fd, n, pos)
            got = len(buf) - len(carry)
        else:
            chunk = os.pread(fd, n, pos)
            got = len(chunk)
        if got <= 0:
            break
        pos += got
        res.bytes_read += got
        if left is not None:
            left -= got
        if skipping and chunk is not None:  # (no carry while skipping)
            cut = _first_sep(chunk)
            if cut < 0:
                if long_head is not None:
                    tail = _roll(tail, chunk)
                continue
            if long_head is not None:
                line = long_head + _roll(tail, chunk[:cut])
                lines, order = _scan_body(line + b"\n", len(line) + 1, lines, order, line_base,
                                          col, matcher, res.path, count=False)
                long_head, tail = None, b""
            lines += chunk.count(b"\n", 0, cut + 1)
            chunk = chunk[cut + 1 :]
            skipping = False
        if chunk is not None:
            buf = chunk
        end = _last_sep(buf) + 1
        if end:
            try:
                lines, order = _scan_body(buf, end, lines, order, line_base, col, matcher,
                                          res.path, handover=handover)
            except _Handover:
                at = pos - len(buf)  # buf: the bytes before the file position
                res.bytes_read -= len(buf)
                if line_base is not None:
                    res.lines += lines
                f.seek(at)
                raise _Handover(order, None if line_base is None else line_base + lines,
                                None if left is None else left + len(buf), at - origin) from None
        rest = buf[end:]
        if len(rest) > LINE_CAP:
            # a line without end in sight: keep its first LINE_CAP bytes and the last LINE_CAP
            # read so far, skip the rest; it is matched at its end (_capped)
            long_head, tail = rest[:LINE_CAP], rest[LINE_CAP:][-LINE_CAP:]
            carry = b""
            skipping = True
        else:
            carry = rest
        now = time.monotonic()
        if now - t_chunk > SLOW_CHUNK_S and size > MIN_CHUNK:
            size //= 2
        if deadline is not None and now > deadline:
            break  # at least one chunk is always read
    if carry and not skipping:
        lines, order = _scan_body(carry + b"\n", len(carry) + 1, lines, order, line_base, col,
                                  matcher, res.path)
    elif skipping:
        if long_head is not None:
            line = long_head + tail
            lines, order = _scan_body(line + b"\n", len(line) + 1, lines, order, line_base,
                                      col, matcher, res.path, count=False)
        lines += 1
    if line_base is not None:
        res.lines += lines
    f.seek(pos)
    return order



def _shapes(buf: bytes) -> tuple[bytes, list[bytes], list[bytes], list[bytes], int]:
    """A chunk's line shapes: its normalised bytes, its segments (the unfinished one after
    the last separator dropped), its distinct shapes, their keys (hex ids marked:
    lines.hex_keys) and how many distinct keys."""
    normed = buf.translate(NORM)
    segs = normed.split(b"\n")
    segs.pop()  # the unfinished segment after the last separator is not ours
    uniq = list(set(segs))
    keys = hex_keys(uniq)
    return normed, segs, uniq, keys, len(uniq) if keys is uniq else len(set(keys))


def _mostly_distinct(nkeys: int, nseg: int) -> bool:
    """Random ids, hashes: dedup does not pay, one search per gate does (_found_by_search)."""
    return nkeys * 4 > nseg and nseg >= 256


def _few_shapes(buf: bytes) -> bool:
    """Whether a chunk is what the Python path reads best: few distinct line shapes, not
    mostly distinct lines - no handover to grep, no literal search (_scan_body's own tests).
    reading._pieces splits a range only then: a range grep reads is already cut in pieces by
    grep's own."""
    _, segs, _, _, nkeys = _shapes(buf)
    return nkeys <= HANDOVER_SHAPES and not _mostly_distinct(nkeys, len(segs))


def _scan_body(buf, end, lines, order, line_base, col, matcher, path, count=True,
               handover=False):
    """Scan buf[:end] (end is just past a separator). Returns updated (lines, order).
    `handover`: raise _Handover (before any event) when the chunk has more than
    HANDOVER_SHAPES distinct line shapes (hex ids marked: lines.hex_keys)."""
    normed, segs, uniq, keys, nkeys = _shapes(buf)
    nseg = len(segs)
    if handover and nkeys > HANDOVER_SHAPES:
        raise _Handover(order, None, None, 0)  # (_scan_range fills in where)
    has_cr = buf.find(b"\r", 0, end) >= 0
    if _mostly_distinct(nkeys, nseg):
        found = _found_by_search(buf, end, normed, matcher)
        return _emit(found, buf, end, normed, nseg, has_cr, lines, order, line_base, col, path,
                     count)
    if (keys is uniq or len(uniq) <= HANDOVER_SHAPES) and not matcher.hits(b"\n".join(uniq)):
        if count:  # (no gate in any line; with many ids the groups below decide as cheaply)
            lines += buf.count(b"\n", 0, end) if has_cr else nseg
        return lines, order + nseg
    found: list = []
    quiet = matcher.quiet
    missed = [0]  # lines matched in vain (grep would not print most): what a handover bounds

    def miss() -> None:
        missed[0] += 1
        if missed[0] > HANDOVER_MISSES:  # nothing emitted yet: grep redoes the chunk
            raise _Handover(order, None, None, 0)

    on_miss = miss if handover else None
    if keys is uniq:  # no hex ids: each shape as itself
        del segs
        for sh in uniq:
            if sh not in quiet and matcher.hits(sh):
                _walk_in(sh, normed, buf, matcher, found, None, on_miss)
        return _emit(found, buf, end, normed, nseg, has_cr, lines, order, line_base, col,
                     path, count)
    # hex ids: the chunk once more with each line's key in place of its shape (as long), so
    # that the lines of a key are found as a shape's are
    key_of = dict(zip(uniq, keys, strict=True))
    keyed = b"\n".join([key_of[sh] for sh in segs]) + b"\n"
    members: dict[bytes, list[bytes]] = {}
    for sh, k in key_of.items():
        members.setdefault(k, []).append(sh)
    where: dict[bytes, list[int]] = {}  # shape -> its lines' offsets (the shapes of a key
    for k, ms in members.items():  # the rules can tell apart: one pass, when one is met)
        if HEX_MARK in k and len(ms) > 1:  # (a key of one shape: that shape's lines, as before)
            if k in quiet:
                continue
            first = keyed.find(b"\n" + k + b"\n") + 1 if not keyed.startswith(k + b"\n") \
                else 0
            if matcher.hex_uniform(k, _capped(buf[first : first + len(k)])):  # one shape
                _walk_in(k, keyed, buf, matcher, found, True, on_miss)
                continue
            if not where:
                want = {sh for ms2 in members.values() if len(ms2) > 1 for sh in ms2}
                at = 0
                for sh in segs:
                    if sh in want:
                        where.setdefault(sh, []).append(at)
                    at += len(sh) + 1
        for sh in ms:
            if sh in quiet or not matcher.hits(sh):
                continue
            if sh in where:
                offs = where[sh]
                _walk(sh, ((p, _capped(buf[p : p + len(sh)])) for p in offs),
                      _last_at(buf, offs[-1], len(sh)), matcher, found, None, on_miss)
            else:
                _walk_in(sh, normed, buf, matcher, found, None, on_miss)
    return _emit(found, buf, end, normed, nseg, has_cr, lines, order, line_base, col, path,
                 count)


def _walk(s: bytes, occ, last, matcher: _Matcher, found: list, uniform: bool | None,
          on_miss=None) -> None:
    """The dedup rule for the lines of one shape in a chunk: `occ` yields (offset, raw line)
    in order; they are matched until REPEAT_KEEP matched (then the last one, `last()`), and a
    shape whose first line matched nothing is quiet, when a few of its lines stand for all
    (can_be_quiet, or `uniform`: hex_uniform's answer for a hex key). `on_miss`: called for
    each line matched in vain (the handover's bound)."""
    quiet = matcher.quiet
    matched = 0
    for p, raw in occ:
        got = matcher.match(raw)
        if got is None and on_miss is not None:
            on_miss()
        if got is not None:
            found.append((p, got))
            matched += 1
            if matched == REPEAT_KEEP and (matcher.can_be_quiet(s, raw) if uniform is None
                                           else uniform):
                # the same line over and over ("loss=nan" every step): its first few and
                # its last occurrence in this chunk are evidence enough
                lp, lraw = last()
                if lp > p:
                    got = matcher.match(lraw)
                    if got is not None:
                        found.append((lp, got))
                break
        elif not matched and (matcher.can_be_quiet(s, raw) if uniform is None else uniform):
            if len(s) <= 1024:  # bounded memory, as the cache above
                if len(quiet) >= 20000:
                    quiet.clear()
                quiet.add(s)
            break


def _last_at(buf: bytes, p: int, n: int):
    return lambda: (p, _capped(buf[p : p + n]))


def _walk_in(s: bytes, normed: bytes, buf: bytes, matcher: _Matcher, found: list,
             uniform: bool | None, on_miss=None) -> None:
    """_walk over the lines of shape (or key) `s` as `normed` (the chunk's shapes, or keys)
    has them, each read from `buf` at the same offset."""
    n = len(s)

    def last() -> tuple[int, bytes]:
        p = normed.rfind(b"\n" + s + b"\n") + 1
        return p, _capped(buf[p : p + n])

    _walk(s, ((p, _capped(buf[p : p + n])) for p in _positions(normed, s)), last, matcher,
          found, uniform, on_miss)


def _found_by_search(buf: bytes, end: int, normed: bytes, matcher: _Matcher) -> list:
    """Mostly distinct lines: one pass of the rule-literal regex over the chunk finds the lines
    worth matching (a line holding only a gate word, "error rate 0.1", is not one)."""
    low = normed[:end].lower()
    if b"\\" in low:
        low = low.replace(b"\\", b"/")
    starts: list[int] = []
    for mark in (b"**", b"`", b"\x1b"):  # marks that can split a literal: line by line
        p = low.find(mark)
        while p != -1:
            starts.append(low.rfind(b"\n", 0, p) + 1)
            nxt = low.find(b"\n", p)
            p = low.find(mark, nxt) if nxt != -1 else -1
    for rx in matcher.literal_scans:
        search = rx.search
        m = search(low)
        while m is not None:
            p = m.start()
            start = low.rfind(b"\n", 0, p) + 1
            line_end = low.find(b"\n", p)  # the rest of this line is a candidate already
            if p - start < LINE_CAP or (line_end if line_end != -1 else end) - p <= LINE_CAP:
                starts.append(start)  # in the part of a long line that is matched
            m = search(low, line_end + 1) if line_end != -1 else None
    groups: dict[bytes, list[tuple]] = {}
    for start in sorted(set(starts)):
        stop = low.find(b"\n", start)
        _group(groups, normed[start:stop], start, _capped(buf[start:stop]))
    return _pick(groups, matcher)


def _group(groups: dict[bytes, list[tuple]], shape: bytes, at: int, raw: bytes) -> None:
    """Add a candidate line to its group: its hex key (with its shape, hex ids marked) or,
    without hex ids, its shape."""
    k = hex_key(shape)
    if k == shape:
        groups.setdefault(shape, []).append((at, raw))
    else:
        groups.setdefault(k, []).append((at, raw, shape))


def _pick(groups: dict[bytes, list[tuple]], matcher: _Matcher) -> list:
    """The dedup path's rule for candidate lines found by a search (the literal regex, or grep):
    per shape, the lines in order until REPEAT_KEEP matched (then its last one), and a shape
    whose first line matched nothing is quiet. `groups` (_group): shape or hex key ->
    [(offset, raw line[, shape])] of one chunk, in offset order; the same events as the dedup
    path gives for that chunk (the lines of a hex key of several shapes are one shape where
    hex_uniform says so)."""
    found: list = []
    quiet = matcher.quiet
    for k, occ in groups.items():
        if HEX_MARK in k:
            if k in quiet:
                continue
            if len({sh for _, _, sh in occ}) > 1 and matcher.hex_uniform(k, occ[0][1]):
                _walk(k, ((p, raw) for p, raw, _ in occ), lambda o=occ: o[-1][:2], matcher,
                      found, True)
                continue
            shapes: dict[bytes, list[tuple[int, bytes]]] = {}
            for p, raw, sh in occ:
                shapes.setdefault(sh, []).append((p, raw))
        else:
            shapes = {k: occ}
        for sh, lst in shapes.items():
            if sh in quiet or not matcher.hits(sh):
                continue
            _walk(sh, iter(lst), lambda o=lst: o[-1], matcher, found, None)
    return found


def _emit(found, buf, end, normed, nseg, has_cr, lines, order, line_base, col, path, count):
    """Turn matches (offset, (rule, detail, text)) into events with line numbers."""
    found.sort(key=lambda x: x[0])
    at = seg = 0
    for p, (rule, detail, text, hit) in found:
        k = normed.count(b"\n", at, p)
        seg += k
        lines += buf.count(b"\n", at, p) if has_cr else k
        at = p
        lineno = None if line_base is None else line_base + lines + 1
        v = hit.view
        col.add(Event(path, lineno, text[:500], rule, detail, order + seg, v.task, v.rank,
                      v.local, v.indented, hit.ref_rank, hit.ref_node))
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
