"""Streaming scan of one log: fixed memory, any size, any bytes.

Which lines are looked at in Python. A file of at least NATIVE_MIN bytes (1 MiB) is searched by GNU
grep (`LC_ALL=C grep -a -b -n -E`, fed through a pipe, see _scan_range_native): its patterns are
the rules' own regexes translated to EREs that match at least every line the regex matches
(literals, ASCII classes and repeats kept; lookarounds, anchors and what cannot be translated left
out; a newline, which no line holds, as any byte; case-sensitive where the rule is; each starts at
a literal and at its rarest character, see _spread and _rare_start: grep's automaton is fast only
between pattern starts), so grep prints only the lines a rule can match - on a log where every line
holds a common word ("error rate 0.01", NCCL_DEBUG=INFO's "NCCL") almost none. Python then matches
those lines with the rules as below, and gets the same events, line numbers and line order as its
own path (tests/test_scan_native.py). grep's automaton is what bounds the speed (some 250 MB/s a
core over about 650 patterns on the benchmark's training log, where half of the bytes can start one
of them; `grep -c error`: about 1 GB/s): a range of at least SPLIT_MIN (32 MiB) is cut at line ends
into up to WORKERS pieces (one per CPU, at most 4), each searched by its own grep at the same time.
When grep is missing or fails, the range is scanned in Python, ScanResult.engine says so and a
warning is logged; GPUALERT_SCAN_NATIVE=0 turns grep off.

Python first (PYTHON_FIRST): even in such a file each range is read by the Python path below
while its chunks hold few distinct line shapes (ordinary training output: a handful per 2 MiB),
since its dedup costs less than grep's automaton and pipe (about 2 against 3.5-4 CPU-s per GiB
on the benchmark's training log). At the first chunk of more than HANDOVER_SHAPES shapes, or
of more than HANDOVER_MISSES lines matched in vain, it stops at that chunk's first line,
before any of the chunk's events, and grep reads the rest of the range on the same chunk grid
(_Handover): the events are those of either path alone (tests/test_scan_native.py).

The Python path (smaller files, and the fallback): each chunk is normalised with one
`bytes.translate` (every digit -> '0', CR -> LF) and split into segments; a training log is
mostly progress lines that differ only in their numbers, so the set of distinct normalised
segments ("shapes") is tiny. Only the distinct shapes are checked for the prefilter substrings
("gates", case-insensitive), and only lines holding a gate are decoded; a shape that matched
nothing is remembered as quiet. A chunk of mostly distinct lines (random ids, NCCL_DEBUG=INFO
pointers) is searched instead for the rules' own literals (one literal-prefixed regex per first
character), so that a line holding only a gate word ("error rate 0.1") costs nothing in Python.
Either way, per chunk a repeated line shape is matched on its first REPEAT_KEEP lines and its
last one (_pick), so both searches and grep's give the same events.

A candidate line is cleaned (colour codes, Markdown marks, "\\" paths), checked with one regex
for the rule literals it holds, and only then stripped of launcher prefixes and timestamps
(line_view) and matched against the regexes of those rules, highest priority first.

Reading policy (reported in the verdict detail as partial reading): a file is read from the
start for at most HEAD_BYTES (1 GiB) and at most HEAD_SHARE of BUDGET_S (20 s); then reading
jumps to the end (where a crash's traceback and Slurm's end-of-job lines are): the last
TAIL_BYTES (64 MiB), or less when the rest of the budget would not read that much at the speed
measured so far, and the middle is skipped. The whole scan takes BUDGET_S plus at most one slow
chunk (or grep block) and the file's last END_BYTES (256 KiB), which are always read. Line
numbers after a jump or a budget stop are unknown (null). A line longer than LINE_CAP is matched
on its first LINE_CAP bytes, else on its last LINE_CAP (a crash line glued after a NUL hole or a
blob ends such a line); the middle is skipped without being buffered (grep is not fed it).
Environment overrides: GPUALERT_SCAN_HEAD_MB, GPUALERT_SCAN_TAIL_MB, GPUALERT_SCAN_BUDGET_S,
GPUALERT_SCAN_NATIVE (0: no grep), GPUALERT_SCAN_NATIVE_MIN (bytes), GPUALERT_SCAN_GREP (path),
GPUALERT_SCAN_WORKERS (1: one grep per range), GPUALERT_SCAN_SPLIT_MIN (bytes),
GPUALERT_SCAN_PYTHON_FIRST (0: grep from the start of a range), GPUALERT_SCAN_HANDOVER_SHAPES.
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import functools
import os
import re
import time
from collections import deque
from dataclasses import dataclass, field
from re import _parser as sre_parse  # type: ignore[attr-defined]  # literal parts for grep

from gpualert_slurm.classify.rules import MIN_LITERAL, Rule, RuleSet, norm_text

CHUNK = 2 << 20
MIN_CHUNK = 64 << 10
SLOW_CHUNK_S = 0.1  # a chunk that took longer halves the next: the budget overshoots little
LINE_CAP = 8 << 10
HEAD_BYTES = int(os.environ.get("GPUALERT_SCAN_HEAD_MB", "1024")) << 20
TAIL_BYTES = int(os.environ.get("GPUALERT_SCAN_TAIL_MB", "64")) << 20
BUDGET_S = float(os.environ.get("GPUALERT_SCAN_BUDGET_S", "20"))
HEAD_SHARE = 0.75  # of the budget for the head; the rest reads the end of the file
END_BYTES = 256 << 10  # the end of a file is always read, budget or not (the crash is there)
KEEP_EVENTS = 200  # first N and last N matched lines are kept per file
REPEAT_KEEP = 3  # occurrences of one repeated line shape matched per chunk (+ its last one)

_TABLE = bytearray(range(256))
for _c in range(ord("0"), ord("9") + 1):
    _TABLE[_c] = ord("0")
_TABLE[ord("\r")] = ord("\n")
NORM = bytes(_TABLE)

# What people's logs wrap around a message (launcher prefixes, timestamps, quoting, markup): the
# rules match the message itself. Each entry: (regex, label kind or None). A label kind says
# whose line it is: "task" (srun --label "3: ", OpenMPI "[1,3]<stderr>:"), "rank" (the global
# rank: torch's "[rank3]:"), "local" (torchrun --tee "[default1]:", a local rank).
_PREFIXES: list[tuple[str, str | None]] = [
    (r"\s*\[rank(\d+)\]:\s?", "rank"),
    (r"\s*\[default(\d+)\]:\s?", "local"),
    (r"\s*\[\d+,(\d+)\]<std(?:out|err)>:\s?", "task"),
    (r"\s*(\d+): ", "task"),
    (r"[ \t]*(?:>[ \t]?)+", None),  # e-mail / Markdown quoting
    # timestamps: ISO (logging, Slurm), clock-only, syslog, dmesg
    (r"\[?\d{4}-\d\d-\d\d[T _]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?"
     r"(?:\s*[|:-]\s*|\s+)", None),
    (r"\[?\d\d:\d\d:\d\d(?:[.,]\d+)?\]?(?:\s*[|-]\s*|\s+)", None),
    (r"[A-Z][a-z]{2} [ \d]?\d \d\d:\d\d:\d\d\s+", None),
    (r"\[\s*\d+\.\d+\]\s*", None),
    (r"(?:[\w.-]+\s+)?kernel:\s*(?:\[\s*\d+\.\d+\]\s*)?", None),
    # docker compose ("trainer-1  | "), kubectl --prefix ("[pod/trainer-0/main] "), journald
    # ("n1 python[4242]: ")
    (r"[A-Za-z][\w.-]*\s+\| ", None),
    (r"\[pod/[^\]\s]+\]\s", None),
    (r"[\w.-]+\s+[\w./-]+\[\d+\]:\s", None),
    # pdsh / DeepSpeed / srun-style host prefixes: a name with a digit ("gpu041: ", "n3: ")
    (r"[a-z][a-z0-9-]*\d[a-z0-9-]*(?:\.[a-z0-9-]+)*: (?=\S)", None),
    # a tqdm bar the message was glued onto (the bar ends with "\r", not a newline)
    (r".*?\d+%\|[^|]*\|[^\[]*\[[^\]]*\]\s*", None),
]
# one regex, the alternatives in the order above (the first that matches is removed)


def _alternative(i: int, p: str) -> str:
    num = r"(?P<n" + str(i) + r">\d+)"  # the label's number, named per alternative
    return "(?P<a" + str(i) + ">" + p.replace(r"(\d+)", num, 1) + ")"


_PREFIX_RX = re.compile("|".join(_alternative(i, p) for i, (p, _) in enumerate(_PREFIXES)))
_PREFIX_KIND = [kind for _, kind in _PREFIXES]
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]")
# Markdown bold and code marks around a message; not "x**2", not Python's __dunders__
_MARKUP = re.compile(r"^(\s*)(?:\*\*(?!\*)|`+)|(?<!\*)(?:\*\*|`+)\s*$|(?<=\s)\*\*(?=[^\s*])"
                     r"|(?<=[^\s*])\*\*(?=[\s:,.])")
MAX_PREFIXES = 8
# an exception line quoted inside prose ("The error was **KeyError: 'x'** here", "got
# `torch.cuda.OutOfMemoryError: CUDA out of memory` again"): a bold or code span that opens
# after some text and holds `[module.]Name: message`; the span is read as the line
_EXC_SPAN = re.compile(r"(?<=\S)\s+(\*\*|`+)((?:[A-Za-z_]\w*\.)*_?[A-Z]\w*: \S.*?)(?:\1|$)")
_SPAN_MARK = "\ue000"  # where such a span began: line_view reads the body from there


@dataclass
class LineView:
    """One log line as the rules see it: prefixes and markup removed."""

    body: str  # leading whitespace kept (a traceback's source lines are indented)
    task: int | None = None
    rank: int | None = None
    local: int | None = None

    @property
    def indented(self) -> bool:
        return self.body[:1].isspace()


def clean_text(text: str) -> str:
    """A line without terminal colour codes and Markdown marks, with "/" paths."""
    body = _ANSI.sub("", text) if ("\x1b" in text or "\x08" in text) else text
    if "\\" in body:  # Windows paths: rules are written with "/"
        body = body.replace("\\", "/")
    if "**" in body or "`" in body:
        span = _EXC_SPAN.search(body)
        if span is not None:
            body = body[:span.start()] + " " + _SPAN_MARK + span.group(2)
        body = _MARKUP.sub(lambda m: m.group(1) or "", body)
    return body


def line_view(text: str, cleaned: bool = False) -> LineView:
    v = LineView(text if cleaned else clean_text(text))
    for _ in range(MAX_PREFIXES):
        m = _PREFIX_RX.match(v.body)
        if m is None or m.end() >= len(v.body):
            break
        i = int(m.lastgroup[1:])  # type: ignore[index]
        if _PREFIX_KIND[i] is not None:
            setattr(v, _PREFIX_KIND[i], int(m.group(f"n{i}")))
        v.body = v.body[m.end():]
    if _SPAN_MARK in v.body:  # an exception quoted in prose: the span is the line (the
        v.body = v.body[v.body.index(_SPAN_MARK) + 1:]  # launcher prefixes before it kept)
    return v


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


_FLAG_CHARS = ((re.IGNORECASE, "i"), (re.MULTILINE, "m"), (re.DOTALL, "s"), (re.ASCII, "a"))


def _flags(bits: int) -> str:
    return "".join(c for f, c in _FLAG_CHARS if bits & f)


def _blind_seq(items, dep: list[bool]) -> str:
    """Regex text matching every text `items` (a parsed sequence) matches and every text
    that differs from one of those only in the values of ASCII digits (lookaheads that
    must fail, back-references and possessive or atomic limits are left off: more, never
    less). `dep` gets True when the sequence reads a digit's value (a digit literal, a class
    of some digits, a back-reference): it matches some digit variants and not others."""
    out = []
    for op, av in items:
        name = str(op)
        if name == "LITERAL":
            digit = 48 <= av <= 57
            dep.append(digit)
            out.append("[0-9]" if digit else re.escape(chr(av)))
        elif name == "NOT_LITERAL":
            digit = 48 <= av <= 57
            dep.append(digit)
            out.append("[\\s\\S]" if digit else "[^" + re.escape(chr(av)) + "]")
        elif name == "ANY":
            out.append(".")
        elif name == "IN":
            out.append(_blind_class(av, dep))
        elif name == "AT":
            out.append(_AT[str(av)])
        elif name == "SUBPATTERN":
            add, drop = _flags(av[1]), _flags(av[2])
            out.append(f"(?{add}{'-' + drop if drop else ''}:{_blind_seq(av[-1], dep)})")
        elif name == "BRANCH":
            out.append("(?:" + "|".join(_blind_seq(alt, dep) for alt in av[1]) + ")")
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            lo, hi = av[0], av[1]
            rep = f"{{{lo},{'' if hi == sre_parse.MAXREPEAT else hi}}}"
            out.append(f"(?:{_blind_seq(av[2], dep)}){rep}"
                       + ("?" if name == "MIN_REPEAT" else ""))
        elif name == "ATOMIC_GROUP":
            out.append(f"(?:{_blind_seq(av, dep)})")
        elif name == "ASSERT":
            out.append(("(?=" if av[0] == 1 else "(?<=") + _blind_seq(av[1], dep) + ")")
        elif name == "ASSERT_NOT":
            _blind_seq(av[1], dep)  # left off, but whether it reads digits counts
        elif name == "GROUPREF":
            dep.append(True)
            out.append("[\\s\\S]*?")
        elif name == "GROUPREF_EXISTS":
            dep.append(True)
            out.append(f"(?:{_blind_seq(av[1], dep)}|{_blind_seq(av[2], dep) if av[2] else ''})")
        else:
            raise ValueError(name)
    return "".join(out)


_AT = {"AT_BEGINNING": "^", "AT_BEGINNING_STRING": "\\A", "AT_BOUNDARY": "\\b",
       "AT_NON_BOUNDARY": "\\B", "AT_END": "$", "AT_END_STRING": "\\Z"}
_CAT = {"CATEGORY_DIGIT": "\\d", "CATEGORY_NOT_DIGIT": "\\D", "CATEGORY_SPACE": "\\s",
        "CATEGORY_NOT_SPACE": "\\S", "CATEGORY_WORD": "\\w", "CATEGORY_NOT_WORD": "\\W"}


def _blind_class(av, dep: list[bool]) -> str:
    """A character class, with all ten ASCII digits added when it holds some but not all."""
    neg, body = "", []
    for op, x in av:
        name = str(op)
        if name == "NEGATE":
            neg = "^"
        elif name == "LITERAL":
            body.append(re.escape(chr(x)))
        elif name == "RANGE":
            body.append(re.escape(chr(x[0])) + "-" + re.escape(chr(x[1])))
        elif name == "CATEGORY":
            body.append(_CAT[str(x)])
        else:
            raise ValueError(name)
    cls = "[" + neg + "".join(body) + "]"
    rx = re.compile(cls)
    n = sum(1 for d in "0123456789" if rx.match(d))
    dep.append(n not in (0, 10))
    return cls if n in (0, 10) else f"(?:{cls}|[0-9])"


@functools.lru_cache(maxsize=4096)
def _digit_blind(source: str) -> tuple[re.Pattern[str], bool] | None:
    """A rule pattern blind to digit values (_blind_seq), compiled, and whether the pattern
    reads a digit's value (if not, it matches every digit variant of a text or none); None
    when it cannot be made (then any line of a shape may match as its others do not)."""
    try:
        parsed = sre_parse.parse(source)
        flags = parsed.state.flags & (re.IGNORECASE | re.MULTILINE | re.DOTALL | re.ASCII)
        dep: list[bool] = []
        return re.compile(_blind_seq(list(parsed), dep), flags), any(dep)
    except (ValueError, KeyError, re.error, RecursionError):
        return None


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
            # the highest priority wins (on a tie, the rule listed first in rules.yaml)
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


def _capped(line: bytes) -> bytes:
    """What of a line is matched: all of it up to 2 x LINE_CAP, else its first and its last
    LINE_CAP bytes (_Matcher.match tries the first, then the rest)."""
    return line if len(line) <= 2 * LINE_CAP else line[:LINE_CAP] + line[-LINE_CAP:]


def _roll(tail: bytes, more: bytes) -> bytes:
    """The last LINE_CAP bytes of tail + more, without copying a long `more` whole."""
    if len(more) >= LINE_CAP:
        return more[-LINE_CAP:]
    return (tail + more)[-LINE_CAP:]


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

            logging.getLogger(__name__).warning("gpualert scan of %s: %s; scanning it in Python",
                                                res.path, e)
            f.seek(at)
            res.bytes_read = got
    return _scan_range(f, limit, res, col, matcher, line_base, resync, order_base, deadline)


class _Handover(Exception):  # noqa: N818  (not an error: control flow, caught by _range)
    """_scan_range met a chunk of more than HANDOVER_SHAPES distinct line shapes: it stopped
    at that chunk's first line (file positioned there, its bytes not counted as read) and
    hands the rest of the range to grep."""

    def __init__(self, order: int, line_base: int | None, limit: int | None, grid: int) -> None:
        super().__init__()
        self.order, self.line_base, self.limit, self.grid = order, line_base, limit, grid


def _mib(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def _scan_range(f, limit, res, col, matcher, line_base, resync=False, order_base=0,
                deadline=None, handover=False) -> int:
    """Scan up to `limit` bytes (None: to EOF), stopping at a line end once past `deadline`.

    line_base None: line numbers unknown. `handover`: raise _Handover at a chunk of more
    than HANDOVER_SHAPES distinct line shapes (grep is then faster than Python).

    Returns the segment counter at the end (events are ordered by it within the file).
    """
    origin = f.tell()  # where the chunk grid starts (grep's, after a handover, too)
    lines = 0  # newlines consumed in this range
    order = order_base
    carry = b""
    skipping = resync  # after a seek we are mid-line: drop up to the first newline
    long_head: bytes | None = None  # skipping a long line: its first LINE_CAP bytes
    tail = b""  # ... and the last LINE_CAP bytes skipped so far (matched at its end)
    left = limit
    size = CHUNK  # shrinks when a chunk is slow (candidate-rich lines), so the deadline holds
    fd, pos = f.fileno(), origin  # pos: the next byte to read (f is sought there at the end)
    while left is None or left > 0:
        n = size if left is None else min(size, left)
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
        nl = buf.rfind(b"\n")
        end = max(nl, buf.rfind(b"\r", nl + 1)) + 1  # (a CR before the last LF: not the end)
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


def _first_sep(b: bytes) -> int:
    a, c = b.find(b"\n"), b.find(b"\r")
    if a < 0:
        return c
    return a if c < 0 else min(a, c)


def _scan_body(buf, end, lines, order, line_base, col, matcher, path, count=True,
               handover=False):
    """Scan buf[:end] (end is just past a separator). Returns updated (lines, order).
    `handover`: raise _Handover (before any event) when the chunk has more than
    HANDOVER_SHAPES distinct line shapes."""
    normed = buf.translate(NORM)
    segs = normed.split(b"\n")
    segs.pop()  # the unfinished segment after the last separator is not ours
    nseg = len(segs)
    uniq = set(segs)
    del segs
    if handover and len(uniq) > HANDOVER_SHAPES:
        raise _Handover(order, None, None, 0)  # (_scan_range fills in where)
    has_cr = buf.find(b"\r", 0, end) >= 0
    if len(uniq) * 4 > nseg and nseg >= 256:
        # mostly distinct lines (random ids, hashes): dedup does not pay, one search per gate does
        found = _found_by_search(buf, end, normed, matcher)
        return _emit(found, buf, end, normed, nseg, has_cr, lines, order, line_base, col, path,
                     count)
    if not matcher.hits(b"\n".join(uniq)):
        if count:
            lines += buf.count(b"\n", 0, end) if has_cr else nseg
        return lines, order + nseg
    # locate each occurrence of a segment holding a gate; decode and match only those
    found = []
    quiet = matcher.quiet
    missed = 0  # lines matched in vain (grep would not print most): what a handover bounds
    for s in uniq:
        if s in quiet or not matcher.hits(s):
            continue
        matched = 0
        for p in _positions(normed, s):
            raw = _capped(buf[p : p + len(s)])
            got = matcher.match(raw)
            if got is None and handover:
                missed += 1
                if missed > HANDOVER_MISSES:  # nothing emitted yet: grep redoes the chunk
                    raise _Handover(order, None, None, 0)
            if got is not None:
                found.append((p, got))
                matched += 1
                if matched == REPEAT_KEEP and matcher.can_be_quiet(s, raw):
                    # the same line over and over ("loss=nan" every step): its first few and
                    # its last occurrence in this chunk are evidence enough
                    last = normed.rfind(b"\n" + s + b"\n") + 1
                    if last > p:
                        got = matcher.match(_capped(buf[last : last + len(s)]))
                        if got is not None:
                            found.append((last, got))
                    break
            elif not matched and matcher.can_be_quiet(s, raw):
                if len(s) <= 1024:  # bounded memory, as the cache above
                    if len(quiet) >= 20000:
                        quiet.clear()
                    quiet.add(s)
                break
    return _emit(found, buf, end, normed, nseg, has_cr, lines, order, line_base, col, path,
                 count)


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
    groups: dict[bytes, list[tuple[int, bytes]]] = {}
    for start in sorted(set(starts)):
        stop = low.find(b"\n", start)
        groups.setdefault(normed[start:stop], []).append(
            (start, _capped(buf[start:stop])))
    return _pick(groups, matcher)


def _pick(groups: dict[bytes, list[tuple[int, bytes]]], matcher: _Matcher) -> list:
    """The dedup path's rule for candidate lines found by a search (the literal regex, or grep):
    per shape, the lines in order until REPEAT_KEEP matched (then its last one), and a shape
    whose first line matched nothing is quiet. `groups`: shape -> [(offset, raw line)] of one
    chunk, in offset order; the same events as the dedup path gives for that chunk."""
    found = []
    quiet = matcher.quiet
    for s, occ in groups.items():
        if s in quiet or not matcher.hits(s):
            continue
        matched = 0
        for p, raw in occ:
            got = matcher.match(raw)
            if got is not None:
                found.append((p, got))
                matched += 1
                if matched == REPEAT_KEEP and matcher.can_be_quiet(s, raw):
                    last, lraw = occ[-1]
                    if last > p:
                        got = matcher.match(lraw)
                        if got is not None:
                            found.append((last, got))
                    break
            elif not matched and matcher.can_be_quiet(s, raw):
                if len(s) <= 1024:
                    if len(quiet) >= 20000:
                        quiet.clear()
                    quiet.add(s)
                break
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


# ---- the native candidate search: GNU grep finds the lines a rule can match ----
#
# grep reads the range through a pipe that a feeder thread fills from the file, so the reading
# policy stays exact: the feeder stops at the byte limit or once past the deadline, then writes
# a sentinel line whose number gives the range's line count. CR becomes LF on the way: the
# scanner's segments are grep's lines, so grep -n numbers them as Event.order does, and no line
# grep buffers is longer than a block plus LINE_CAP (the rest of a longer segment is not fed).
# Lines holding what clean_text removes (escape codes, "**", "`") are always printed.

NATIVE = os.environ.get("GPUALERT_SCAN_NATIVE", "1") != "0"
NATIVE_MIN = int(os.environ.get("GPUALERT_SCAN_NATIVE_MIN", str(1 << 20)))  # smaller: Python
# Python first, grep from the first chunk of more than HANDOVER_SHAPES distinct line shapes on:
# ordinary training output is a few shapes per chunk (digits normalised), which Python's dedup
# reads at about 2.3 CPU-s per GiB, where grep's automaton over the rules' ~1000 EREs, fed
# through its pipe, took 4 (bench_classify's ordinary log); each distinct shape costs Python
# some 20 us (the gates), so past a few hundred per 2 MiB chunk grep is the cheaper
PYTHON_FIRST = os.environ.get("GPUALERT_SCAN_PYTHON_FIRST", "1") != "0"
HANDOVER_SHAPES = int(os.environ.get("GPUALERT_SCAN_HANDOVER_SHAPES", "512"))
HANDOVER_MISSES = 256  # lines of a chunk matched in vain (shapes that cannot be quiet): grep's
# a hook may run with a bare PATH: Debian's grep is /usr/bin/grep (/bin/grep, merged /usr)
def _which(name: str) -> str | None:
    """shutil.which(name) (shutil's import, with its compression modules, costs more than this
    lookup: every `gpualert classify` imports this module)."""
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(d or ".", name)
        if os.access(path, os.F_OK | os.X_OK) and not os.path.isdir(path):
            return path
    return None


GREP = os.environ.get("GPUALERT_SCAN_GREP") or _which("grep") or "/usr/bin/grep"
BLOCK = 1 << 20
GREP_MATCH = ("-a", "-E")  # case-sensitive: a rule that ignores case has [xX] classes
# grep's multi-pattern automaton bounds the speed (about 250 MB/s a core): a range of at least
# SPLIT_MIN bytes is cut in up to WORKERS pieces (at least SPLIT_MIN / 2 each), each searched
# by its own grep at the same time; at most 4, so a node's next job keeps its CPUs
_CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
WORKERS = min(4, int(os.environ.get("GPUALERT_SCAN_WORKERS", "0") or 0) or _CPUS)
SPLIT_MIN = int(os.environ.get("GPUALERT_SCAN_SPLIT_MIN", str(32 << 20)))
# characters whose lower() holds an ASCII letter (re's IGNORECASE and str.lower() match them to
# ASCII letters; grep's [xX] classes in the C locale do not): lines holding them always print
_FOLDS_TO_ASCII = ("\u0130", "\u0131", "\u017f", "\u212a")


class NativeError(RuntimeError):
    """grep could not be used for a range; the caller scans it in Python."""


def _ere_char(ch: str, icase: bool = False) -> str:
    if ch == "/":
        return "[/\\]"  # clean_text reads "\" as "/"
    if icase and ch.isascii() and ch.isalpha():
        return f"[{ch.lower()}{ch.upper()}]"
    if ch.isalnum() or ch == " ":
        return ch
    return {"]": "[]]", "^": "\\^", "\\": "[\\]"}.get(ch, f"[{ch}]")


def _ere_wide(ch: str) -> str:
    """A non-ASCII literal character of a rule's literals, as its UTF-8 bytes (the literal
    is lower-cased: either case, as an alternation; "." for one whose case forms differ in
    length): a rule of CJK, Hangul or Cyrillic words (the shell's "Killed" in the locale's
    words) keeps a narrow ERE, not "..."."""
    if ch == "\n":
        return "."
    forms = {ch, ch.lower(), ch.upper()}
    if any(len(f) != 1 for f in forms):
        return "."
    return ch if len(forms) == 1 else "(" + "|".join(sorted(forms)) + ")"


_HI = "\x80-\xff"  # the bytes of a non-ASCII character (grep reads bytes: LC_ALL=C)
_CATEGORY = {"CATEGORY_DIGIT": "0-9", "CATEGORY_SPACE": "\t\x0b\x0c\r \x1c-\x1f",
             "CATEGORY_WORD": "A-Za-z0-9_"}  # plus, in str regexes, non-ASCII characters


def _bracket(neg: bool, chars: set[str], ranges: list[str]) -> str:
    if "/" in chars:
        chars.add("\\")  # clean_text reads "\" as "/"
    body = ("]" if "]" in chars else "") + "".join(sorted(chars - {"]", "^", "-"})) \
        + "".join(ranges)
    body += ("^" if "^" in chars else "") + ("-" if "-" in chars else "")
    if body == "^":
        return "\\^" if not neg else "[^^]"
    return "[" + ("^" if neg else "") + body + "]"


def _ere_class(op: str, av, icase: bool = False) -> tuple[str, bool] | None:
    """A one-character regex item as a byte class, and whether it may match a non-ASCII
    character (then it takes 1 to 4 bytes); None: not a one-character item. `icase`: the
    regex ignores case here (grep does not: both cases are in the class)."""
    # grep's lines hold no newline: a newline in a class is left out, a newline alone is "."
    if op == "LITERAL":
        if av == 10:
            return ".", False
        return (_ere_char(chr(av), icase), False) if av < 128 else ("[" + _HI + "]", True)
    if op == "NOT_LITERAL":
        return (_bracket(True, {chr(av)}, []), True) if av < 128 and av != 10 else (".", True)
    if op == "ANY":
        return ".", True
    if op != "IN":
        return None
    neg, chars, ranges, wide = False, set(), [], False
    for iop, iav in av:
        name = str(iop)
        if name == "NEGATE":
            neg = True
        elif name == "LITERAL" and iav == 10:
            continue
        elif name == "LITERAL" and iav < 128:
            chars.add(chr(iav))
            if icase and not neg:
                chars |= {chr(iav).lower(), chr(iav).upper()}
        elif name == "RANGE" and iav[1] < 128:
            lo, hi = chr(iav[0]), chr(iav[1])
            if lo in "]^-\\" or hi in "]^-\\":
                return ".", True  # an odd range: any character (more, never less)
            ranges.append(lo + "-" + hi)
            if icase and not neg and any(c.isalpha() for c in map(chr, range(iav[0], iav[1] + 1))):
                ranges += ["a-z", "A-Z"]  # (a negated class stays: it excludes less)
        elif name == "CATEGORY" and str(iav) in _CATEGORY:
            ranges.append(_CATEGORY[str(iav)])
            wide = True
        else:  # a non-ASCII member, a negated category: any character
            return ".", True
    if not chars and not ranges:  # only a newline: no line holds one
        return ".", True
    if neg:  # every byte of a non-ASCII character is outside a negated ASCII class
        return (_bracket(True, chars, ranges) if not wide else "."), True
    if wide:
        ranges.append(_HI)
    return _bracket(False, chars, ranges), wide


def _icase(icase: bool, group) -> bool:
    """Whether a group ignores case: (?i:...) turns it on, (?-i:...) off."""
    add, drop = group[1], group[2]
    return bool((icase or add & re.IGNORECASE) and not drop & re.IGNORECASE)


def _ere_seq(items, top: bool = False, icase: bool = False) -> str:
    """An ERE (for LC_ALL=C grep -E, over a line's raw bytes) matching at least every text
    the parsed regex sequence matches: literals, ASCII classes and repeats as they are; a
    class that may match a non-ASCII character as 1 to 4 bytes; zero-width items dropped, what
    is not translated (back-references) as ".*". `top`: the whole pattern, searched anywhere
    in a line: what comes before its first and after its last literal part is left off (more
    lines match, never fewer; grep's automaton is much faster without leading classes).
    `icase`: the regex ignores case (letters become [xX]; inline (?i:...) groups too)."""
    out: list[tuple[str, bool]] = []  # (ERE, a literal part: a char or a group of them)
    for op, av in items:
        name = str(op)
        one = _ere_class(name, av, icase)
        if one is not None:
            out.append((one[0] + ("{1,4}" if one[1] else ""),
                        name == "LITERAL" and av < 128 and av != 10))
        elif name == "SUBPATTERN":
            inner = _ere_seq(list(av[-1]), icase=_icase(icase, av))
            if inner:
                out.append(("(" + inner + ")", True))
        elif name in ("MAX_REPEAT", "MIN_REPEAT"):
            lo, hi, body = av[0], av[1], list(av[2])
            one = _ere_class(str(body[0][0]), body[0][1], icase) if len(body) == 1 else None
            if one is not None:
                item, wide = one
            else:
                inner = _ere_seq(body, icase=icase)
                if not inner:
                    continue
                item, wide = "(" + inner + ")", False
            if not wide and hi <= 16:
                out.append((item + f"{{{lo},{hi}}}", False))
            else:  # an unbounded, long or byte-width-varying repeat: at least as many
                out.append((item + ("*" if lo == 0 else "+"), False))
        elif name == "BRANCH":
            alts = [_ere_seq(list(alt), icase=icase) for alt in av[1]]
            if all(alts):
                out.append(("(" + "|".join(alts) + ")", True))
        elif name in ("AT", "ASSERT", "ASSERT_NOT"):
            continue  # zero width: dropping it matches more, never less
        else:
            out.append((".*", False))
    if top:
        lit = [i for i, (_, is_lit) in enumerate(out) if is_lit]
        out = out[lit[0] : lit[-1] + 1] if lit else []
    return "".join(e for e, _ in out)


# The printable characters of training logs from the most common (counted over the corpus's
# logs). grep's automaton runs fast while it stays in its start state and slowly from each byte
# that can start a pattern, so a pattern is given to grep from its rarest character on (the
# rest of it is a superset: Python decides), as long as CUT_KEEP letters and digits are left
# (grep still prints few lines); uppercase letters are rare, and grep is case-sensitive where
# the rule is.
_COMMON = (" seotr0al.i1ncp2/34:6'5d^mh78,u9g=_|][-kbfywIv\"E()CNT{}FLGAUxDR>BSPO*W<zqZ+#`~MHVj"
           "\\%&KX;!YJ@?Q")
CUT_KEEP = 8


def _rank(ch: str, icase: bool) -> int:
    """How rare a character is in logs (higher: rarer); either case counts when ignored."""
    ranks = [_COMMON.find(c) for c in ({ch.lower(), ch.upper()} if icase else {ch})]
    return min(len(_COMMON) if r < 0 else r for r in ranks)


def _rare_start(items: list, icase: bool) -> tuple[list, bool]:
    """The parsed regex sequence from its rarest top-level literal character on, keeping at
    least CUT_KEEP letters and digits (a pattern that is one group: its inside); and whether
    that ignores case."""
    while len(items) == 1 and str(items[0][0]) == "SUBPATTERN":
        icase = _icase(icase, items[0][1])
        items = list(items[0][1][-1])
    left = sum(1 for op, av in items if str(op) == "LITERAL" and av < 128 and chr(av).isalnum())
    # an unbounded repeat after the start keeps the automaton out of its start state to the
    # line's end: a start past the last one is better than a rarer character before it
    loops = [i for i, (op, av) in enumerate(items)
             if str(op) in ("MAX_REPEAT", "MIN_REPEAT") and av[1] == sre_parse.MAXREPEAT]
    best, rarest = 0, (-1, -1)
    for i, (op, av) in enumerate(items):
        if str(op) != "LITERAL" or av >= 128 or av == 10:
            continue
        if left < CUT_KEEP:
            break
        rank = (not loops or i > loops[-1], _rank(chr(av), icase))
        if rank > rarest:
            best, rarest = i, rank
        if chr(av).isalnum():
            left -= 1
    while best + 1 < len(items) and items[best] == (sre_parse.LITERAL, ord(" ")):
        best += 1  # the most common byte of all: never where grep's patterns start
    return items[best:], icase


def _spread(items: list, icase: bool, budget: int = 16) -> list[tuple[list, bool]]:
    """The parsed regex sequence as one or more sequences, one of which every match holds,
    whose heads are literal where the regex's is not: what leads without being needed (zero
    width, optional, a class) is left off, a leading repeated group is taken once (its last
    time), and a leading alternation is spread over its alternatives (at most `budget`)."""
    while items:
        op, av = items[0]
        name = str(op)
        if name == "SUBPATTERN":
            inner = list(av[-1])
            if _icase(icase, av) != icase:
                break
            if len(inner) == 1 and str(inner[0][0]) == "BRANCH":
                items = [inner[0], *items[1:]]
                continue
            items = inner + items[1:]
        elif name == "BRANCH":
            alts = av[1]
            if any(not _spread([*alt], icase)[0][0] for alt in alts):
                items = items[1:]  # an alternative needs nothing: the rest alone is searched
                continue
            if len(alts) > budget:
                break
            out: list[tuple[list, bool]] = []
            for alt in alts:
                out += _spread([*alt, *items[1:]], icase, budget // len(alts))
            return out
        elif name in ("MAX_REPEAT", "MIN_REPEAT") and av[0] >= 1:
            items = [*av[2], *items[1:]]
        elif name == "LITERAL":
            break
        else:  # zero width, optional, a class: not needed by a search for the rest
            items = items[1:]
    return [(items, icase)]


def grep_patterns(rules: list[Rule]) -> list[bytes]:
    """EREs (for LC_ALL=C grep -E, GREP_MATCH) of which one matches every line a pattern of
    `rules` can match after clean_text: per pattern, its literal parts in order joined by ".*"
    (the rest of the regex left to Python), or, when those are too short, the pattern's own
    prefilter literals (digits as [0-9], "error\n" as "error" then no letter or digit). Lines
    holding what clean_text removes or a character whose case folds to ASCII are always
    candidates."""
    out = {b"[*][*]", b"`", b"\x1b", b"\x08"} | {c.encode() for c in _FOLDS_TO_ASCII}
    for r in rules:
        for i, pat in enumerate(r.patterns):
            heads = _spread(list(sre_parse.parse(pat.pattern, pat.flags)),
                            bool(pat.flags & re.IGNORECASE))
            eres = [_ere_seq(cut, top=True, icase=ic)
                    for cut, ic in (_rare_start(items, icase) for items, icase in heads)]
            if all(len(re.sub(r"[^A-Za-z]", "", ere)) >= MIN_LITERAL for ere in eres):
                out.update(ere.encode("latin-1") for ere in eres)
                continue
            for lit in r.plits[i] if i < len(r.plits) else ():
                at_end = lit.endswith("\n")
                body = lit.rstrip("\n").lstrip(" ") or lit.rstrip("\n")
                rx = "".join("[0-9]" if ch == "0" else _ere_char(ch, True)  # (either case)
                             if ch.isascii() and ch != "\n" else _ere_wide(ch) for ch in body)
                out.add((rx + ("[^A-Za-z0-9]*$" if at_end else "")).encode())
    return sorted(out)


def _native_ok(matcher: _Matcher) -> list[bytes]:
    if matcher.native_patterns is False:
        matcher.native_patterns = grep_patterns(matcher.rules)
    return matcher.native_patterns


class _Feeder:
    """Thread: file bytes [pos, limit) -> grep's stdin, CR as LF, long segments cut at
    LINE_CAP; stops past the deadline (after at least one block), then the sentinel. It notes
    which blocks held CRs (line numbers count LF only), so the file is not read a second time
    to count them."""

    def __init__(self, f, pos: int, limit: int | None, deadline: float | None,
                 pipe, sentinel: bytes) -> None:
        self.f, self.pos, self.limit, self.deadline = f, pos, limit, deadline
        self.pipe, self.sentinel = pipe, sentinel
        self.read = 0  # bytes read from the file
        self.fed = 0  # bytes written to grep (without the sentinel)
        self.last = b"\n"  # the last byte fed
        self.skips: list[tuple[int, int]] = []  # (stream offset, file bytes not fed before it)
        self.crs = 0  # CRs in the bytes read
        # blocks holding a CR: offsets from pos (appended before the block is fed, so a reader
        # of grep's output finds the block of every line it gets) and (CRs before, CRs, length)
        self.cr_starts: list[int] = []
        self.cr_blocks: list[tuple[int, int, int]] = []
        self.error: BaseException | None = None
        import threading  # grep's modules: imported by the scans that use grep (>= 1 MiB)

        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self._feed()
        except BaseException as e:  # reported by the reader; grep gets EOF either way
            self.error = e
        finally:
            with contextlib.suppress(OSError):
                self.pipe.close()

    def _feed(self) -> None:
        since = 0  # bytes of the current segment fed so far
        cutting = False  # in a segment longer than LINE_CAP: skip to its end
        tail = b""  # the last LINE_CAP bytes skipped of that segment: fed at its end (_capped)
        skipped = 0
        write = self.pipe.write
        left = self.limit
        first = True
        while left is None or left > 0:
            if not first and self.deadline is not None and time.monotonic() > self.deadline:
                break
            first = False
            n = BLOCK if left is None else min(BLOCK, left)
            block = os.pread(self.f.fileno(), n, self.pos + self.read)
            if not block:
                break
            if b"\r" in block:
                k = block.count(b"\r")
                self.cr_blocks.append((self.crs, k, len(block)))
                self.cr_starts.append(self.read)
                self.crs += k
                block = block.replace(b"\r", b"\n")
            self.read += len(block)
            if left is not None:
                left -= len(block)
            first_sep = block.find(b"\n")
            head_len = len(block) if first_sep < 0 else first_sep
            if cutting or since + head_len > LINE_CAP:
                # the current segment is too long: feed up to LINE_CAP of it, skip the rest
                keep = max(0, LINE_CAP - since) if not cutting else 0
                if keep:
                    write(block[:keep])
                    self.fed += keep
                    self.last = block[keep - 1 : keep]
                if first_sep < 0:
                    tail = _roll(tail, block[keep:])
                    skipped += len(block) - keep
                    since, cutting = LINE_CAP, True
                    continue
                tail = _roll(tail, block[keep:first_sep])
                skipped += first_sep - keep
                self._feed_tail(write, tail, skipped)
                tail = b""
                cutting = False
                block = block[first_sep:]
            last_sep = block.rfind(b"\n")
            since = len(block) - last_sep - 1 if last_sep >= 0 else since + len(block)
            write(block)
            self.fed += len(block)
            self.last = block[-1:]
        if cutting:  # the range ends inside a long line: its end as far as read
            self._feed_tail(write, tail, skipped)
        write(b"\n" + self.sentinel + b"\n")

    def _feed_tail(self, write, tail: bytes, skipped: int) -> None:
        """Feed the end of a cut segment (the `tail` bytes just before where the segment was
        left, `skipped` counting them): what follows maps back past what was not fed."""
        self.skips.append((self.fed, skipped - len(tail)))
        if tail:
            write(tail)
            self.fed += len(tail)
            self.last = tail[-1:]

    def file_offset(self, stream: int) -> int:
        """Offset in the file (from self.pos) of a stream offset grep reports."""
        k = bisect.bisect_right(self.skips, (stream, 1 << 62))
        return stream + (self.skips[k - 1][1] if k else 0)


class _CrCount:
    """CRs before an offset of a feeder's range: those of the CR blocks before it, plus, inside
    a CR block, counted from the file (forward only, as grep's lines come in order). A log
    without CR costs one bisect per line."""

    def __init__(self, f, feeder: _Feeder) -> None:
        self.fd, self.fe = f.fileno(), feeder
        self.i = -1  # the CR block being counted in
        self.data = b""
        self.done = self.n = 0

    def before(self, off: int) -> int:
        fe = self.fe
        i = bisect.bisect_right(fe.cr_starts, off) - 1
        if i < 0:
            return 0
        cum, k, length = fe.cr_blocks[i]
        rel = off - fe.cr_starts[i]
        if rel >= length:
            return cum + k
        if i != self.i:
            self.i, self.done, self.n = i, 0, 0
            self.data = os.pread(self.fd, length, fe.pos + fe.cr_starts[i])
        if rel < self.done:
            self.done = self.n = 0
        self.n += self.data.count(b"\r", self.done, rel)
        self.done = rel
        return cum + self.n


class _Grep:
    """One grep over the file bytes [pos, pos + limit) (limit None: to the end of the file),
    fed by a _Feeder thread."""

    def __init__(self, f, pos: int, limit: int | None, deadline: float | None,
                 patterns: list[bytes]) -> None:
        self.sentinel = b"gpualert-scan-end-" + os.urandom(12).hex().encode()
        cmd = [GREP, *GREP_MATCH, "-b", "-n"]
        for p in [*patterns, self.sentinel]:
            cmd += ["-e", p]
        import subprocess

        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=dict(os.environ, LC_ALL="C"),
                                         bufsize=1 << 16)
        except OSError as e:
            raise NativeError(f"{GREP} cannot be run: {e}") from None
        with contextlib.suppress(OSError, AttributeError):  # fewer switches: feeder and grep
            fcntl.fcntl(self.proc.stdin.fileno(), fcntl.F_SETPIPE_SZ, BLOCK)  # type: ignore
        self.feeder = _Feeder(f, pos, limit, deadline, self.proc.stdin, self.sentinel)
        self.crs = _CrCount(f, self.feeder)
        self.lines_total: int | None = None
        self.feeder.thread.start()

    def rows(self):
        """(grep's line index, offset from pos in the file, raw line) of each line grep prints;
        the sentinel's line sets lines_total. Raises ValueError on output not as expected."""
        out = self.proc.stdout
        assert out is not None
        while True:
            row = out.readline(2 * LINE_CAP + 64)
            if not row:
                return
            if not row.endswith(b"\n"):  # a long line: its start and its end (_capped)
                end = b""
                while True:
                    more = out.readline(1 << 16)
                    end = _roll(end, more)
                    if not more or more.endswith(b"\n"):
                        break
                row += end
            a = row.index(b":")
            b = row.index(b":", a + 1)
            seg = int(row[:a]) - 1
            stream = int(row[a + 1 : b])
            raw = _capped(row[b + 1 :].rstrip(b"\n"))
            if raw == self.sentinel and stream == self.feeder.fed + 1:
                self.lines_total = seg
                continue
            yield seg, self.feeder.file_offset(stream), raw

    def finish(self) -> int:
        """Wait for grep and the feeder; the range's segment count. NativeError if either
        failed."""
        self.proc.wait()
        self.feeder.thread.join()
        err = self.proc.stderr.read().decode(errors="replace").strip() if self.proc.stderr else ""
        if self.feeder.error is not None:
            raise NativeError(f"feeding grep failed: {self.feeder.error}")
        if self.proc.returncode != 0 or self.lines_total is None:
            raise NativeError(f"{GREP} failed (exit {self.proc.returncode}): {err[-300:]}")
        # the sentinel's line: one after an empty line when the range ended with a separator
        fe = self.feeder
        return self.lines_total - 1 if fe.fed == 0 or fe.last == b"\n" else self.lines_total

    def close(self) -> None:
        """Stop grep (if still running) and its feeder; close its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.feeder.thread.join()
        for s in (self.proc.stdout, self.proc.stderr):
            if s is not None:
                s.close()


class _Ahead:
    """A thread reading a _Grep's rows while the lines before its range are matched: at most
    QUEUE batches of BATCH rows or BATCH_BYTES ahead (at most about 9 MiB; then grep and its
    feeder wait: only a log with that many candidate lines, bound by Python anyway)."""

    QUEUE, BATCH, BATCH_BYTES = 128, 256, 64 << 10

    def __init__(self, grep: _Grep) -> None:
        import queue
        import threading

        self.grep = grep
        self.q: queue.Queue[list | None] = queue.Queue(self.QUEUE)
        self.full = queue.Full
        self.stop = False
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            batch: list = []
            size = 0
            for row in self.grep.rows():
                batch.append(row)
                size += len(row[2])
                if len(batch) >= self.BATCH or size >= self.BATCH_BYTES:
                    self._put(batch)
                    batch, size = [], 0
            self._put(batch)
        except BaseException as e:  # raised again by rows() in the scanning thread
            self.error = e
        finally:
            self._put(None)

    def _put(self, item: list | None) -> None:
        while not self.stop:
            with contextlib.suppress(self.full):
                self.q.put(item, timeout=0.1)
                return

    def rows(self):
        while (batch := self.q.get()) is not None:
            yield from batch
        self.thread.join()
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self.stop = True
        if self.grep.proc.poll() is None:  # its output ends: the thread sees the end
            self.grep.proc.kill()
        self.thread.join()
        self.grep.close()


def _pieces(f, start: int, limit: int | None) -> list[int]:
    """Where a range is cut for WORKERS greps: just after the first line end past each
    1/n-th of it, n such that each piece holds at least SPLIT_MIN / 2 bytes (no cut: [])."""
    fd = f.fileno()
    size = os.fstat(fd).st_size
    stop = size if limit is None else min(start + limit, size)
    span = stop - start
    n = min(WORKERS, span // max(1, SPLIT_MIN // 2)) if SPLIT_MIN > 0 else WORKERS
    if n < 2 or span < 2:
        return []
    cuts: list[int] = []
    for k in range(1, n):
        at = max(start + span * k // n, cuts[-1] if cuts else start)
        for _ in range(64):  # up to 4 MiB further: no line end there, no cut there
            b = os.pread(fd, 1 << 16, at)
            i = _first_sep(b) if b else -1
            if i >= 0:
                if at + i + 1 < stop:
                    cuts.append(at + i + 1)
                break
            if not b:
                break
            at += len(b)
    return sorted(set(cuts))


def _scan_range_native(f, limit, res, col, matcher, line_base, resync=False, order_base=0,
                       deadline=None, grid=0) -> int:
    """_scan_range with grep finding the candidate lines; the same events, lines, order and
    file position afterwards. Raises NativeError (nothing added) when grep cannot be used.

    A range of SPLIT_MIN bytes or more is cut at line ends into up to WORKERS pieces, each
    searched by its own grep at the same time (grep's automaton is what bounds the speed);
    the pieces' lines are matched one piece after the other, in file order. When the deadline
    stops a piece early, the pieces after it are dropped: what was read stays one stretch.
    `grid`: how far the range starts past the start of _scan_range's chunk grid (after a
    handover: the chunks are those of the Python path's, so are the events)."""
    patterns = _native_ok(matcher)
    start = f.tell()
    read = 0  # bytes before `start` that belong to this range (the resync)
    if resync:  # mid-line after a seek: the scan starts after the first separator
        while True:
            b = f.read(BLOCK)
            if not b:
                res.bytes_read += read
                return order_base
            cut = _first_sep(b)
            if cut >= 0:
                read += cut + 1
                break
            read += len(b)
        start += read
        if limit is not None:
            limit = max(0, limit - read)
    events: list[Event] = []
    chunk_no = -1
    groups: dict[bytes, list[tuple[int, bytes]]] = {}
    meta: dict[int, tuple[int, int]] = {}  # range offset -> (segment index, line index)

    def flush() -> None:
        for p, got in sorted(_pick(groups, matcher), key=lambda x: x[0]):
            seg, line = meta[p]
            rule, detail, text, hit = got
            v = hit.view
            events.append(Event(res.path, None if line_base is None else line_base + line + 1,
                                text[:500], rule, detail, order_base + seg, v.task, v.rank,
                                v.local, v.indented, hit.ref_rank, hit.ref_node))
        groups.clear()
        meta.clear()

    def take(rows, at: int, seg_base: int, cr_base: int, crs: _CrCount) -> None:
        """Group one grep's candidate lines by chunk (the one holding a line's end, as the
        Python path reads them) and shape; `at`: where its range starts in this range."""
        nonlocal chunk_no
        for seg, where, raw in rows:
            seg += seg_base
            n_cr = cr_base + crs.before(where)
            where += at
            k = (grid + read + where + len(raw)) // CHUNK
            if k != chunk_no:
                flush()
                chunk_no = k
            meta[where] = (seg, seg - n_cr)
            groups.setdefault(raw.translate(NORM), []).append((where, raw))

    cuts = _pieces(f, start, limit) if WORKERS > 1 else []
    bounds = [start, *cuts]
    greps: list[_Grep] = []
    aheads: list[_Ahead] = []
    got = crs = segs = 0  # bytes read, CRs in them, segments: the pieces matched so far
    try:
        for k, at in enumerate(bounds):
            if k + 1 < len(bounds):
                size: int | None = bounds[k + 1] - at
            else:
                size = None if limit is None else start + limit - at
            greps.append(_Grep(f, at, size, deadline, patterns))
            if k:
                aheads.append(_Ahead(greps[-1]))
        for k, g in enumerate(greps):
            take(g.rows() if k == 0 else aheads[k - 1].rows(), got, segs, crs, g.crs)
            segs += g.finish()
            got, crs = got + g.feeder.read, crs + g.feeder.crs
            if k + 1 < len(bounds) and start + got < bounds[k + 1]:
                break  # the deadline stopped this piece: the ones after it are dropped
        flush()
    except (ValueError, OSError) as e:  # output not as expected: the Python path decides
        raise NativeError(f"reading {GREP}'s output failed: {e}") from None
    finally:
        for a in aheads:
            a.close()
        for g in greps:
            g.close()
    for ev in events:
        col.add(ev)
    res.bytes_read += read + got
    if line_base is not None:
        res.lines += segs - crs
    f.seek(start + got)
    return order_base + segs
