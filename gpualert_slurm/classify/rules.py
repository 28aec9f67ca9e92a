"""Loading and validating the classification rules and class table (both YAML data)."""

from __future__ import annotations

import os
import re
from re import _parser as sre_parse  # type: ignore[attr-defined]  # literal extraction
from typing import TYPE_CHECKING

from gpualert_slurm.classify.datafiles import (
    CLASSES_FILE,
    RULES_DIR,
    parse_yaml,
    shipped_bytes,
    shipped_rule_files,
)
from gpualert_slurm.classify.ruleset import (
    FOLDS_TO_ASCII,
    ROLES,
    SCOPES,
    SOURCES,
    TEXT_SOURCES,
    Patterns,
    Rule,
    RuleError,
    RuleSet,
    norm_text,
)
from gpualert_slurm.core.classes import ClassesError, ClassInfo, parse_classes

__all__ = ["CLASSES_FILE", "FOLDS_TO_ASCII", "RULES_DIR", "ROLES", "SCOPES", "SOURCES",
           "TEXT_SOURCES", "ClassInfo", "Patterns", "Rule", "RuleError", "RuleSet", "build_rules",
           "load_rules", "norm_text", "parse_yaml", "required_literals", "shipped_bytes",
           "shipped_rule_files"]

if TYPE_CHECKING:  # pathlib's import (urllib.parse, ipaddress) is a few ms of every classify
    from pathlib import Path

SITE_RULES_DIR = "/etc/gpualert/rules.d"
MIN_LITERAL = 3


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
_DEFAULT_FILES: list[tuple[str, bytes]] = []  # what _DEFAULT was built from
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
    global _DEFAULT, _DEFAULT_FILES
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
        _DEFAULT, _DEFAULT_FILES = rs, files
    return rs


def drop_if_stale() -> None:
    """For a long-lived process that forks its workers (hooks/queue.py): the rule set an earlier
    load_rules() kept is dropped when the files it was built from are not those in use now (an
    edited or added site rule, another GPUALERT_RULES_DIR in the job's environment), so that the
    next load reads them, as a fresh process would."""
    global _DEFAULT
    if _DEFAULT is None:
        return
    try:
        same = _rule_files(True, None) == _DEFAULT_FILES
    except RuleError:  # an unreadable site file: the next load says so
        same = False
    if not same:
        _DEFAULT = None


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
