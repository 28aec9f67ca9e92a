"""Loading and validating the classification rules and class table (both YAML data)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from re import _parser as sre_parse  # type: ignore[attr-defined]  # literal extraction
from typing import TYPE_CHECKING

from gpualert_slurm.core.classes import ClassesError, ClassInfo, parse_classes

if TYPE_CHECKING:  # pathlib's import (urllib.parse, ipaddress) is a few ms of every classify
    from pathlib import Path

# chain: joins chained tracebacks; marker: never decides, kept as structure (a traceback's
# header) or for the rank/node it names (srun's "n2: task 1: Exited with exit code 1")
ROLES = ("root", "cascade", "confirmation", "context", "chain", "marker")
SOURCES = ("log", "kernel", "slurm", "exit")
TEXT_SOURCES = ("log", "kernel")  # scanned files; slurm/exit rules match one line of facts
SCOPES = ("line", "traceback")
SITE_RULES_DIR = "/etc/gpualert/rules.d"
MIN_LITERAL = 3
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
            from gpualert_slurm.classify import rulecache

            rx = rulecache.compile_program(text, self.programs.get(key), binary)
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


def _literal_runs(items: list, out: list[list[str]]) -> None:
    """Collect candidate literal sets from a parsed regex sequence (one must occur)."""
    run: list[str] = []

    def flush() -> None:
        if run:
            out.append(["".join(run)])
            run.clear()

    for op, av in items:
        name = str(op)
        if name == "LITERAL":
            run.append(chr(av))
            continue
        flush()
        if name == "SUBPATTERN":
            _literal_runs(list(av[-1]), out)
        elif name == "BRANCH":
            alts = []
            for alt in av[1]:
                sub: list[list[str]] = []
                _literal_runs(list(alt), sub)
                best = _best(sub)
                if best is None:
                    alts = None
                    break
                alts.extend(best)
            if alts:
                out.append(alts)
    flush()


def _best(cands: list[list[str]]) -> list[str] | None:
    cands = [c for c in cands if all(len(s) >= MIN_LITERAL for s in c)]
    if not cands:
        return None
    return max(cands, key=lambda c: (min(len(s) for s in c), -len(c)))


def required_literals(pattern: str) -> list[str] | None:
    """Literals (lower-cased) of which at least one occurs in any text the pattern matches."""
    parsed = sre_parse.parse(pattern)
    cands: list[list[str]] = []
    _literal_runs(list(parsed), cands)
    best = _best(cands)
    return [s.lower() for s in best] if best else None


def parse_yaml(path: str, text: str):
    """YAML text parsed (PyYAML's safe loader); RuleError naming `path` when it is not YAML."""
    import yaml  # only when a file is parsed: a cached rule set needs no YAML

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise RuleError(f"{path}: not valid YAML: {e}") from None


def _load_yaml(path: str, text: str) -> dict:
    import yaml  # only when the rules are built: a cached rule set needs no YAML

    try:
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml
    except yaml.YAMLError as e:
        raise RuleError(f"{path}: not valid YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise RuleError(f"{path}: expected a mapping with a 'rules' list at top level")
    return data


def _parse_classes(path: str, data: dict) -> dict[str, ClassInfo]:
    try:
        return parse_classes(path, data)
    except ClassesError as e:
        raise RuleError(str(e)) from None


def _parse_rules(path: str, data: dict, classes: dict[str, ClassInfo]) -> list[Rule]:
    raw = data.get("rules", [])
    if not isinstance(raw, list):
        raise RuleError(f"{path}: field 'rules' must be a list")
    out: list[Rule] = []
    seen: set[str] = set()
    for i, r in enumerate(raw):
        if not isinstance(r, dict):
            raise RuleError(f"{path}: rule #{i + 1}: must be a mapping")
        rid = r.get("id")
        if not isinstance(rid, str) or not rid:
            raise RuleError(f"{path}: rule #{i + 1}: field 'id' is missing or not a string")
        where = f"{path}: rule {rid!r}"
        if rid in seen:
            raise RuleError(f"{where}: field 'id': duplicate id in this file")
        seen.add(rid)
        unknown = set(r) - {"id", "class", "role", "source", "priority", "patterns", "scope",
                          "detail", "confidence", "silent", "requires", "literals", "if_seen",
                          "detail_next"}
        if unknown:
            raise RuleError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        cls = r.get("class")
        if cls not in classes:
            raise RuleError(f"{where}: field 'class': {cls!r} is not a known class id")
        role = r.get("role", "root")
        if role not in ROLES:
            raise RuleError(f"{where}: field 'role': {role!r} is not one of {', '.join(ROLES)}")
        source = r.get("source", "log")
        if source not in SOURCES:
            raise RuleError(
                f"{where}: field 'source': {source!r} is not one of {', '.join(SOURCES)}"
            )
        scope = r.get("scope", "line")
        if scope not in SCOPES:
            raise RuleError(f"{where}: field 'scope': {scope!r} is not one of {', '.join(SCOPES)}")
        if scope == "traceback" and role not in ("cascade", "confirmation"):
            raise RuleError(f"{where}: field 'scope': traceback rules must have role cascade "
                            f"or confirmation, not {role!r}")
        fixed = r.get("detail")
        if fixed is not None and (not isinstance(fixed, str) or not fixed.strip()):
            raise RuleError(f"{where}: field 'detail': must be a non-empty string")
        cap = r.get("confidence")
        if cap is not None and (not isinstance(cap, (int, float)) or isinstance(cap, bool)
                                or not 0 < cap <= 1):
            raise RuleError(f"{where}: field 'confidence': must be a number in (0, 1], "
                            f"got {cap!r}")
        silent = r.get("silent", False)
        if not isinstance(silent, bool):
            raise RuleError(f"{where}: field 'silent': must be true or false, got {silent!r}")
        requires = r.get("requires")
        if requires is not None and not isinstance(requires, str):
            raise RuleError(f"{where}: field 'requires': must be a rule id, got {requires!r}")
        if_seen = r.get("if_seen")
        if if_seen is not None:
            if not (isinstance(if_seen, dict) and set(if_seen) == {"rule", "class"}
                    and isinstance(if_seen["rule"], str)):
                raise RuleError(f"{where}: field 'if_seen': must be {{rule: <rule id>, class: "
                                f"<class id>}}, got {if_seen!r}")
            if if_seen["class"] not in classes:
                raise RuleError(f"{where}: field 'if_seen': class {if_seen['class']!r} is not "
                                "a known class id")
            if_seen = (if_seen["rule"], if_seen["class"])
        detail_next = r.get("detail_next", False)
        if not isinstance(detail_next, bool):
            raise RuleError(f"{where}: field 'detail_next': must be true or false, "
                            f"got {detail_next!r}")
        prio = r.get("priority", 50)
        if not isinstance(prio, int) or isinstance(prio, bool) or not 0 <= prio <= 100:
            raise RuleError(f"{where}: field 'priority': must be an integer 0-100, got {prio!r}")
        pats = r.get("patterns")
        if isinstance(pats, str):
            pats = [pats]
        if not isinstance(pats, list) or not pats:
            raise RuleError(f"{where}: field 'patterns': must be a non-empty list of regexes")
        compiled, literals, digit_lits, plits, required = [], [], [], [], []
        for p in pats:
            if not isinstance(p, str) or not p:
                raise RuleError(f"{where}: field 'patterns': {p!r} is not a non-empty string")
            try:
                compiled.append(re.compile(p))
            except re.error as e:
                raise RuleError(
                    f"{where}: field 'patterns': {p!r} is not a valid regex: {e}"
                ) from None
            lits = required_literals(p)
            if not lits:
                raise RuleError(
                    f"{where}: field 'patterns': {p!r} has no literal text of at least "
                    f"{MIN_LITERAL} characters (needed to prefilter lines quickly)"
                )
            literals.extend(lits)
            plits.append(tuple(norm_text(x) for x in lits))
            required.append(plits[-1])
            if re.search(r"(?<!\\)\d", p):
                digit_lits.extend(lits)
        given = r.get("literals")
        if given is not None:
            # the rule's own, more specific literals (one of them is in every line it matches;
            # "\n" stands for the line's end): fewer lines reach its regexes
            if not isinstance(given, list) or not given or not all(
                    isinstance(x, str) and len(x.rstrip("\n")) >= MIN_LITERAL for x in given):
                raise RuleError(f"{where}: field 'literals': must be a list of strings of at "
                                f"least {MIN_LITERAL} characters")
            literals = [x.lower() for x in given]
            plits = [tuple(norm_text(x) for x in given)] * len(compiled)
            digit_lits = [x for x in literals if any(c.isdigit() for c in x)]
        out.append(Rule(rid, cls, role, source, prio, Patterns(pats, required, compiled),
                        literals, path, digit_lits,
                        scope, fixed, None if cap is None else float(cap), silent, requires,
                        plits, given is not None, if_seen, detail_next))
    return out


def _site_files() -> list[str]:
    d = os.environ.get("GPUALERT_RULES_DIR", SITE_RULES_DIR)
    try:
        names = os.listdir(d)
    except OSError:  # none (or not a directory): no site rules
        return []
    return sorted(os.path.join(d, n) for n in names if n.endswith(".yaml"))


_DEFAULT: RuleSet | None = None
_HERE = os.path.dirname(os.path.abspath(__file__))
CLASSES_FILE = "gpualert_slurm/classify/classes.yaml"
# the shipped rules: one file per failure family, read in file-name order as one list (like a
# rules.d; a rule's place decides ties among equal priorities), named in errors as
# RULES_DIR/<file>
RULES_DIR = "gpualert_slurm/classify/rules"


def shipped_rule_files() -> list[str]:
    """The shipped rule files (classify/rules/*.yaml), in the order they are read."""
    return sorted(n for n in os.listdir(os.path.join(_HERE, "rules")) if n.endswith(".yaml"))


def shipped_bytes(name: str) -> bytes:
    """A data file shipped beside this module (classify/*.yaml), as bytes."""
    with open(os.path.join(_HERE, name), "rb") as f:
        return f.read()


def _rule_files(site: bool, extra_files: list[Path] | None) -> list[tuple[str, bytes]]:
    """(name shown in errors, bytes) of each file the rule set is built from, in order: the
    class table, the shipped rule files (RULES_DIR/*.yaml), the site rules, the extra files."""
    out = [(CLASSES_FILE, shipped_bytes("classes.yaml"))]
    out += [(f"{RULES_DIR}/{n}", shipped_bytes(f"rules/{n}")) for n in shipped_rule_files()]
    for f in (_site_files() if site else []) + [str(x) for x in extra_files or []]:
        try:
            with open(f, "rb") as fh:
                out.append((f, fh.read()))
        except OSError as e:
            raise RuleError(f"{f}: cannot read rule file: {e}") from None
    return out


def _text(name: str, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RuleError(f"{name}: cannot read rule file: {e}") from None


def load_rules(
    extra_files: list[Path] | None = None, use_cache: bool = True, site: bool = True
) -> RuleSet:
    """Shipped rules + site rules (GPUALERT_RULES_DIR or /etc/gpualert/rules.d/*.yaml).

    Raises RuleError naming file, rule and field. A hook that must produce a verdict anyway
    can retry with site=False (shipped rules only). Without extra files, the rule set comes
    from the on-disk cache when it holds one built from these very files (rulecache.py: keyed
    by their bytes, so an edited site rule takes effect at once), and root writes it there.
    """
    global _DEFAULT
    use_cache = use_cache and site and extra_files is None
    if use_cache and _DEFAULT is not None:
        return _DEFAULT
    files = _rule_files(site, extra_files)
    rs, key = None, None
    if extra_files is None:
        from gpualert_slurm.classify import rulecache

        try:
            key = rulecache.key(files)
        except (OSError, TypeError):  # a source not on disk (a zip import, no __file__)
            key = None
        rs = rulecache.load(key) if key else None
    if rs is None:
        rs = build_rules(files)
        if key:
            rulecache.save(key, rs)
    if use_cache:
        _DEFAULT = rs
    return rs


def build_rules(files: list[tuple[str, bytes]]) -> RuleSet:
    """The rule set of these files (_rule_files' order): parsed, validated, indexed."""
    (cpath, cdata), *rest = files
    classes = _parse_classes(cpath, _load_yaml(cpath, _text(cpath, cdata)))
    gates: list[str] = []
    by_id: dict[str, Rule] = {}
    for name, data in rest:
        doc = _load_yaml(name, _text(name, data))
        if not name.startswith(RULES_DIR + "/"):  # a site or extra file
            for r in _parse_rules(name, doc, classes):
                by_id[r.id] = r  # a site rule with a shipped id replaces it
            continue
        gates += [str(g).lower() for g in doc.get("prefilter", [])]
        for r in _parse_rules(name, doc, classes):
            if r.id in by_id:  # one list: an id is shipped once
                raise RuleError(f"{name}: rule {r.id!r}: field 'id': duplicate id (also in "
                                f"{by_id[r.id].origin})")
            by_id[r.id] = r
    rs = RuleSet(classes, list(by_id.values()))
    for r in rs.rules:
        if r.requires is not None and r.requires not in by_id:
            raise RuleError(f"{r.origin}: rule {r.id!r}: field 'requires': "
                            f"{r.requires!r} is not a rule id")
        if r.if_seen is not None and r.if_seen[0] not in by_id:
            raise RuleError(f"{r.origin}: rule {r.id!r}: field 'if_seen': "
                            f"{r.if_seen[0]!r} is not a rule id")
    _build_prefilter(rs, gates)
    return rs


def trie(words: list[str]) -> str:
    """A regex matching any of `words`, as a trie (one branch per next character): Python's
    re tries the alternatives of a flat alternation one by one at every position."""
    root: dict = {}
    for w in words:
        node = root
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def rx(node: dict) -> str:
        alts = [re.escape(ch) + rx(sub) for ch, sub in sorted(node.items()) if ch]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return f"(?:{body})?" if "" in node else body

    return rx(root)


def _build_literals(rs: RuleSet, source: str) -> None:
    rules = rs.scanned(source)
    lits = sorted({lit for r in rules for alts in r.plits for lit in alts})
    # which (rule, literal slot) each alternative literal fills: looked up by the substrings of
    # a found literal, not by testing every rule against it (that was quadratic in the rules:
    # half of load_rules' time at 800 rules)
    owners: dict[str, list[tuple[int, int]]] = {}
    for pos, r in enumerate(rules):
        for i, alts in enumerate(r.plits):
            for x in set(alts):
                owners.setdefault(x, []).append((pos, i))
    table: dict[str, list[tuple[Rule, tuple[int, ...]]]] = {}
    for lit in lits:
        # a literal found at a position also stands for the literals inside it (the regex
        # reports one literal per start position: the longest)
        found: dict[int, set[int]] = {}
        subs = {lit[a:b] for a in range(len(lit)) for b in range(a + 1, len(lit) + 1)} | {""}
        for sub in subs & owners.keys():
            for pos, i in owners[sub]:
                found.setdefault(pos, set()).add(i)
        table[lit] = [(rules[pos], tuple(sorted(found[pos]))) for pos in sorted(found)]
    rs.literal_rules[source] = table
    rs.literal_src[source] = f"(?=({trie(lits)}))"
    # over a chunk's bytes: one regex per first character of the literals, so that each has
    # a literal prefix (re then skips ahead with a fast search, not position by position);
    # a literal's leading spaces are left off (a candidate line is matched in full later)
    by_first: dict[str, list[str]] = {}
    for lit in table:
        key = lit.lstrip(" ") or lit
        by_first.setdefault(key[0], []).append(key)
    rs.literal_scan_src[source] = [trie(sorted(set(v))) for v in by_first.values()]


def _build_prefilter(rs: RuleSet, gates: list[str]) -> None:
    for source in TEXT_SOURCES:
        _build_literals(rs, source)
        src_gates = list(gates)
        table: dict[str, list[Rule]] = {}
        # context rules are tried on every line some other rule's gate let through: a gate of
        # their own would only let lines through that nothing can decide
        for rule in [r for r in rs.scanned(source) if r.role != "context"]:
            for lit in rule.literals:
                hit = next((g for g in src_gates if g in lit), None)
                if hit is None:  # not covered by the shipped gates: its literal becomes one
                    src_gates.append(lit)
                    hit = lit
                lst = table.setdefault(hit, [])
                if rule not in lst:
                    lst.append(rule)
        used = [g for g in src_gates if g in table]
        rs.prefilter[source] = used
        rs.digit_gates[source] = {
            next(g for g in used if g in lit)
            for rule in rs.scanned(source) if rule.role != "context"
            for lit in rule.digit_literals
        }
        rs.gate_rules[source] = table
