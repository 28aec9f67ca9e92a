"""The rule set's types: a Rule, its lazily compiled Patterns, the built RuleSet with its
literal and gate tables, and re's compiled programs that the cache keeps for the large regexes.
The rule files (rules.py) build one; the cache (rulecache.py) stores and restores one; the
scanner (scan/) matches with one."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from gpualert_slurm.core.classes import ClassInfo

# chain: joins chained tracebacks; marker: never decides, kept as structure (a traceback's
# header) or for the rank/node it names (srun's "n2: task 1: Exited with exit code 1")
ROLES = ("root", "cascade", "confirmation", "context", "chain", "marker")
SOURCES = ("log", "kernel", "slurm", "exit")
TEXT_SOURCES = ("log", "kernel")  # scanned files; slurm/exit rules match one line of facts
SCOPES = ("line", "traceback")
_DIGITS = {ord(str(d)): "0" for d in range(10)}


def norm_text(s: str) -> str:
    """Lower-cased, every digit '0': how lines and literals are compared before any regex."""
    return s.lower().translate(_DIGITS)


# characters whose lower() is not what re's IGNORECASE matches them to (an ASCII letter): a
# literal test on a text holding one proves nothing
FOLDS_TO_ASCII = ("\u0130", "\u0131", "\u017f", "\u212a")


class RuleError(ValueError):
    """A rule or class file is invalid; the message names the file, rule and field."""


class Patterns(Sequence):
    """A rule's regexes, each compiled when first used: a run of `gpualert classify` tries only
    the rules whose literals its lines hold, so most of the ~800 regexes are never compiled
    (compiling them all was most of a small log's classify time)."""

    __slots__ = ("sources", "required", "_rx")

    def __init__(self, sources: Iterable[str], required: Iterable[tuple[str, ...]] = (),
                 compiled: Iterable[re.Pattern[str]] = ()) -> None:
        self.sources = tuple(sources)
        # per pattern, its required_literals (norm_text'ed): one of them is in every text it
        # matches, whatever the rule's own `literals` say
        self.required = tuple(tuple(x) for x in required)
        self._rx: list[re.Pattern[str] | None] = list(compiled) or [None] * len(self.sources)

    def __len__(self) -> int:
        return len(self.sources)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[k] for k in range(len(self.sources))[i]]
        rx = self._rx[i]
        if rx is None:
            rx = self._rx[i] = re.compile(self.sources[i])
        return rx

    def __iter__(self) -> Iterator[re.Pattern[str]]:
        return (self[i] for i in range(len(self.sources)))

    def __repr__(self) -> str:
        return f"Patterns({list(self.sources)!r})"

    def search_any(self, text: str, normed: str) -> bool:
        """Whether one of the patterns matches `text` (`normed`: its norm_text), trying only
        those one of whose required literals `normed` holds (the others cannot match)."""
        for i, req in enumerate(self.required):
            if any(x in normed for x in req) and self[i].search(text):
                return True
        return False


@dataclass(eq=False)  # identity: rules are compared and hashed by object
class Rule:
    id: str
    cls: str
    role: str
    source: str
    priority: int
    patterns: Patterns  # compiled on first use
    literals: list[str]  # lower-cased; one of them occurs in every line a pattern matches
    origin: str  # file the rule came from
    digit_literals: list[str] = field(default_factory=list)  # literals of patterns with a
    # literal digit ("Errno 28" is not "Errno 13", though both normalise to "errno 00")
    scope: str = "line"  # or "traceback": applies to the exception ending its traceback
    detail: str | None = None  # fixed verdict detail when no (?P<detail>) group captured one
    confidence: float | None = None  # cap on the verdict's confidence: weak evidence
    silent: bool = False  # decides even on exit 0 when it ends the log (a NaN abort)
    requires: str | None = None  # id of a rule whose line must come shortly before this one
    plits: list[tuple[str, ...]] = field(default_factory=list)  # per pattern: one of these
    # (norm_text'ed) occurs in every line it matches - a cheap test before the regex
    own_literals: bool = False  # plits given in the rule's `literals`, not read off patterns
    # (rule id, class): the event takes that class when a line of that rule is in the job's logs
    if_seen: tuple[str, str] | None = None
    # a line that ends before its message ("thread 'main' panicked at src/main.rs:4:5:", R's
    # "Error in f(x) : "): the next line of the log is the rest of the verdict's detail
    detail_next: bool = False

    def match(self, line: str, which: Iterable[int] | None = None) -> re.Match[str] | None:
        """The first pattern matching `line`, of those numbered `which` (all by default: the
        scanner passes the patterns whose literals are in the line)."""
        for i in range(len(self.patterns)) if which is None else sorted(which):
            m = self.patterns[i].search(line)
            if m:
                return m
        return None


@dataclass
class RuleSet:
    classes: dict[str, ClassInfo]
    rules: list[Rule]
    prefilter: dict[str, list[str]] = field(default_factory=dict)  # source -> gates
    gate_rules: dict[str, dict[str, list[Rule]]] = field(default_factory=dict)
    digit_gates: dict[str, set[str]] = field(default_factory=dict)  # source -> gates
    # source -> one regex (its text: compiled by literal_regex, when a line needs it) finding,
    # at every position of a norm_text'ed line, the rule literal that starts there; and
    # literal -> the rules that literal (or a part of it) belongs to
    literal_src: dict[str, str] = field(default_factory=dict)
    literal_rules: dict[str, dict[str, list[tuple[Rule, tuple[int, ...]]]]] = field(
        default_factory=dict)  # literal -> (rule, the indexes of its patterns it stands for)
    # source -> the regexes (texts) over a chunk's bytes that find the rule literals, one per
    # first character of the literals (scan/python.py's _found_by_search; literal_scans)
    literal_scan_src: dict[str, list[str]] = field(default_factory=dict)
    # regex text -> re's compiled program for it, from the cache (rulecache.py): the literal
    # regexes are large, and re takes tens of ms to compile them
    programs: dict[str, list] = field(default_factory=dict, repr=False)
    _compiled: dict[str, re.Pattern] = field(default_factory=dict, repr=False)
    cached: str | None = None  # the cache file it was read from (None: built from the files)

    def _regex(self, text: str, binary: bool = False) -> re.Pattern:
        key = ("b:" if binary else "s:") + text  # a bytes regex is another program
        rx = self._compiled.get(key)
        if rx is None:
            rx = compile_program(text, self.programs.get(key), binary)
            self._compiled[key] = rx
        return rx

    def literal_regex(self, source: str) -> re.Pattern[str]:
        return self._regex(self.literal_src[source])

    def literal_scans(self, source: str) -> list[re.Pattern[bytes]]:
        return [self._regex(t, binary=True) for t in self.literal_scan_src[source]]

    def any_match(self, text: str, sources: tuple[str, ...] = TEXT_SOURCES) -> bool:
        """Whether a rule of `sources` matches `text` (as Rule.match would, with any of its
        patterns), trying only the patterns whose required literals `text` holds."""
        rules = [r for r in self.rules if r.source in sources]
        if any(c in text for c in FOLDS_TO_ASCII):  # literal tests prove nothing here
            return any(r.match(text) for r in rules)
        normed = norm_text(text)
        return any(r.patterns.search_any(text, normed) for r in rules)

    def for_source(self, source: str) -> list[Rule]:
        return [r for r in self.rules if r.source == source]

    def scanned(self, source: str) -> list[Rule]:
        """The rules a scanned file of this source is matched against: a task log holds kernel
        lines too (containers print dmesg, people paste both), so evidence counts wherever it
        appears; a kernel log holds only kernel lines."""
        return [r for r in self.rules if r.source == source
                or (source == "log" and r.source == "kernel")]

    def match_fact(self, source: str, line: str) -> tuple[Rule, str] | None:
        """The highest-priority root rule of a facts source matching the facts line."""
        best = None
        for r in self.for_source(source):
            if r.role == "root" and (best is None or r.priority > best.priority) and r.match(line):
                best = r
        return (best, line) if best else None


# ---- re's compiled programs of the large regexes ----

def program(text: str, binary: bool = False) -> list:
    """What re.compile hands to the interpreter's _sre.compile for this regex: [flags,
    groups, groupindex, the code as base64 of 32-bit words]."""
    import binascii
    from array import array
    from re import _compiler, _parser  # type: ignore[attr-defined]

    pattern = text.encode("utf-8", "replace") if binary else text
    p = _parser.parse(pattern, 0)
    code = array("I", _compiler._code(p, 0))
    return [p.state.flags, p.state.groups, dict(p.state.groupdict),
            binascii.b2a_base64(code.tobytes(), newline=False).decode("ascii")]


def compile_program(text: str, prog: list | None, binary: bool = False) -> re.Pattern:
    """re.compile(text) (as bytes when `binary`), from its program when one is given (the
    same object re.compile builds, without re's parser and compiler: tens of ms for the
    literal regexes); re.compile itself when there is none or it does not fit."""
    pattern = text.encode("utf-8", "replace") if binary else text
    if prog is not None:
        try:
            import _sre
            import binascii
            from array import array

            flags, groups, groupindex, b64 = prog
            code = array("I")
            code.frombytes(binascii.a2b_base64(b64))
            indexgroup: list[str | None] = [None] * groups
            for name, i in groupindex.items():
                indexgroup[i] = name
            return _sre.compile(pattern, flags, code.tolist(), groups - 1, groupindex,
                                tuple(indexgroup))
        except Exception:  # noqa: BLE001  (another layout, a bad program: re decides)
            pass
    return re.compile(pattern)
