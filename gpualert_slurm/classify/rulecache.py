"""The built rule set, kept on disk between runs: `gpualert classify` (every epilog, every job)
then loads one JSON file instead of parsing the YAML and building the literal tables again.

Key: a BLAKE2b hash of every input the built rule set depends on: the names and bytes of the
files it is built from (classes.yaml, each shipped rules/*.yaml family file, each site rules.d
file, in order: an edited, added or removed rule file gives another key, so it takes effect at
once), precedence.yaml (whose parsed steps are kept too, see shipped_yaml), the source of the
modules that build and store it (BUILDERS), the package version and the exact Python version (re's
compiled programs are kept for the large literal regexes, and they are the interpreter's own).

Trust: the file is read only when the directory and the file are owned by root and writable by
no one else, the file is a plain file with one link (opened O_NOFOLLOW|O_NONBLOCK relative to
the directory's fd, then fstat'ed), no larger than MAX_BYTES, JSON (no pickle: nothing in it is
code), and names the key it was built for. Anything else, a stale, corrupt, foreign or missing
file, is ignored and the rules are built from the files. Only root writes it (the epilogs run
as root; `make install` builds it): to a temporary file in the directory, renamed into place,
mode 0644 so that users' own `gpualert classify` runs read it. A rule set is written only when
it reads back identical (every field of every rule, every table, in order), so the cache cannot
change a verdict. GPUALERT_RULES_CACHE_DIR names the directory ("" or "off": no cache).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import stat
import sys
from collections.abc import Iterator, Mapping

from gpualert_slurm.classify.datafiles import parse_yaml, shipped_bytes
from gpualert_slurm.classify.ruleset import Patterns, Rule, RuleSet, compile_program, program
from gpualert_slurm.core.classes import ClassInfo

CACHE_DIR = "/var/cache/gpualert"
FORMAT = 1
MAX_BYTES = 64 << 20
KEEP = 16  # cache files kept in the directory (several installs and rule versions share it)
PREFIX = "rules-"
# the code that builds and stores a rule set: its source is part of the key
BUILDERS = ("rules", "ruleset", "datafiles", "rulecache")
_LOADED_DATA: dict[str, object] = {}  # shipped YAML files parsed, from the cache in use


def cache_dir() -> str | None:
    d = os.environ.get("GPUALERT_RULES_CACHE_DIR", CACHE_DIR)
    return None if d in ("", "off") else d


def key(files: list[tuple[str, bytes]]) -> str:
    """The cache key of a rule set built from `files` ((name, bytes), rules._rule_files)."""
    from gpualert_slurm import __version__

    try:  # CPython's own BLAKE2: hashlib's import loads OpenSSL, ms of every classify
        from _blake2 import blake2b  # type: ignore[import-not-found]
    except ImportError:
        from hashlib import blake2b  # type: ignore[assignment]
    h = blake2b(digest_size=32)

    def part(name: str, data: bytes) -> None:
        h.update(b"%d:%s\0%d:" % (len(name), name.encode(), len(data)))
        h.update(data)

    part("format", str(FORMAT).encode())
    part("version", __version__.encode())
    part("python", f"{sys.version}|{sys.implementation.cache_tag}".encode())
    here = os.path.dirname(os.path.abspath(__file__))
    for mod in BUILDERS:
        with open(os.path.join(here, mod + ".py"), "rb") as f:
            part(f"gpualert_slurm.classify.{mod}", f.read())
    part("precedence.yaml", shipped_bytes("precedence.yaml"))
    for name, data in files:
        part(name, data)
    return h.hexdigest()


def _name(k: str) -> str:
    return f"{PREFIX}{k}.json"


def _trusted(st: os.stat_result) -> bool:
    return st.st_uid == 0 and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def read(k: str) -> dict | None:
    """The cache file's object for key k, or None when there is none that may be trusted."""
    d = cache_dir()
    if d is None:
        return None
    try:
        dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not _trusted(os.fstat(dfd)):
            return None
        fd = os.open(_name(k), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dfd)
        try:
            st = os.fstat(fd)
            if not (stat.S_ISREG(st.st_mode) and _trusted(st) and st.st_nlink == 1
                    and st.st_size <= MAX_BYTES):
                return None
            chunks = []
            while data := os.read(fd, 1 << 20):
                chunks.append(data)
                if sum(map(len, chunks)) > MAX_BYTES:
                    return None
        finally:
            os.close(fd)
        obj = json.loads(b"".join(chunks))
    except (OSError, ValueError, RecursionError):
        return None
    finally:
        os.close(dfd)
    if not isinstance(obj, dict) or obj.get("format") != FORMAT or obj.get("key") != k:
        return None
    return obj


def load(k: str) -> RuleSet | None:
    """The cached rule set for key k, or None (missing, stale, corrupt or not root's)."""
    import gc

    # the JSON is some 100k small objects, none of them in a cycle: without this, the
    # collector runs over all of them (and every module) a few times while they are made,
    # which doubled the time of a load
    enabled = gc.isenabled()
    gc.disable()
    try:
        obj = read(k)
        if obj is None:
            return None
        rs = restore(obj)
        data = obj["data"]
        if not isinstance(data, dict):
            return None
    except Exception:  # noqa: BLE001  a corrupt cache is no cache: the files decide
        return None
    finally:
        if enabled:
            gc.enable()
    _LOADED_DATA.clear()
    _LOADED_DATA.update(data)
    rs.cached = os.path.join(cache_dir() or "", _name(k))
    return rs


def shipped_yaml(name: str, shown: str):
    """A shipped classify/*.yaml file (precedence.yaml), parsed: from the cache in use when it
    holds it (the key covers its bytes), else with PyYAML (RuleError naming `shown` when it is
    not YAML)."""
    if name in _LOADED_DATA:
        return _LOADED_DATA[name]
    return parse_yaml(shown, shipped_bytes(name).decode("utf-8"))


# ---- the rule set as JSON ----

def dump(rs: RuleSet) -> dict:
    """The rule set as JSON-able data (restore reads it back): rules as lists of their fields'
    values (`rule_fields` names them), named elsewhere by position; as few objects as can be,
    since making them is most of a load."""
    pos = {id(r): i for i, r in enumerate(rs.rules)}
    names = [f.name for f in dataclasses.fields(Rule)]
    rules = []
    for r in rs.rules:
        row = []
        for name in names:
            v = getattr(r, name)
            if isinstance(v, Patterns):  # its required literals when not the rule's plits
                v = [list(v.sources), None if list(v.required) == list(r.plits)
                     else [list(x) for x in v.required]]
            elif name == "plits":
                v = [list(x) for x in v]
            elif isinstance(v, tuple):
                v = list(v)
            row.append(v)
        rules.append(row)
    return {
        "classes": [[c.id, c.domain, c.hint] for c in rs.classes.values()],
        "rule_fields": names,
        "rules": rules,
        "prefilter": rs.prefilter,
        "gate_rules": {s: {g: [pos[id(r)] for r in lst] for g, lst in t.items()}
                       for s, t in rs.gate_rules.items()},
        "digit_gates": {s: sorted(g) for s, g in rs.digit_gates.items()},
        "literal_src": rs.literal_src,
        # literal -> "rule:i.j;rule:i": one string each, read when a line holds the literal
        "literal_rules": {s: {lit: ";".join(f"{pos[id(r)]}:{'.'.join(map(str, ix))}"
                                            for r, ix in lst)
                              for lit, lst in t.items()} for s, t in rs.literal_rules.items()},
        "literal_scan_src": rs.literal_scan_src,
    }


class LiteralTable(Mapping):
    """RuleSet.literal_rules of one source from the cache: each literal's (rule, pattern
    indexes) list made when a line first holds it (most never do)."""

    def __init__(self, raw: dict[str, str], rules: list[Rule]) -> None:
        self.raw, self.rules = raw, rules
        self.made: dict[str, list[tuple[Rule, tuple[int, ...]]]] = {}

    def __getitem__(self, lit: str) -> list[tuple[Rule, tuple[int, ...]]]:
        got = self.made.get(lit)
        if got is None:
            got = []
            for item in self.raw[lit].split(";"):
                i, ix = item.split(":")
                got.append((self.rules[int(i)], tuple(int(x) for x in ix.split("."))))
            self.made[lit] = got
        return got

    def __iter__(self) -> Iterator[str]:
        return iter(self.raw)

    def __len__(self) -> int:
        return len(self.raw)


def restore(obj: dict) -> RuleSet:
    """The rule set of dump's data (plus the compiled programs save added)."""
    classes = {c[0]: ClassInfo(c[0], c[1], c[2]) for c in obj["classes"]}
    names = obj["rule_fields"]
    rules = []
    for row in obj["rules"]:
        kw = dict(zip(names, row, strict=True))
        kw["plits"] = plits = [tuple(x) for x in kw["plits"]]
        sources, required = kw["patterns"]
        kw["patterns"] = Patterns(sources, plits if required is None else required)
        if kw.get("if_seen") is not None:
            kw["if_seen"] = tuple(kw["if_seen"])
        rules.append(Rule(**kw))
    rs = RuleSet(classes, rules)
    rs.prefilter = {s: list(g) for s, g in obj["prefilter"].items()}
    rs.gate_rules = {s: {g: [rules[i] for i in lst] for g, lst in t.items()}
                     for s, t in obj["gate_rules"].items()}
    rs.digit_gates = {s: set(g) for s, g in obj["digit_gates"].items()}
    rs.literal_src = dict(obj["literal_src"])
    rs.literal_rules = {s: LiteralTable(t, rules)  # type: ignore[misc]
                        for s, t in obj["literal_rules"].items()}
    rs.literal_scan_src = {s: list(v) for s, v in obj["literal_scan_src"].items()}
    rs.programs = dict(obj.get("programs", {}))
    return rs


def _canon(x, pos: dict[int, int]):
    """x as plain nested data that compares equal only when x is the same: types kept (1,
    1.0 and True differ; a tuple is not a list), dict order kept, rules by position. (Exact
    types, most common first: isinstance against Patterns' and LiteralTable's ABCs is slow.)"""
    t = type(x)
    if t is str or t is int or t is float or t is bool or x is None:
        return (t.__name__, x)
    if t is list or t is tuple:
        return (t.__name__, [_canon(v, pos) for v in x])
    if t is dict or t is LiteralTable:  # (a LiteralTable reads as the dict it stands for)
        return ("dict", [(_canon(k, pos), _canon(v, pos)) for k, v in x.items()])
    if t is Rule:
        return ("rule", pos[id(x)])
    if t is Patterns:
        return ("patterns", x.sources, x.required)
    if t is ClassInfo:
        return ("class", x.id, x.domain, x.hint)
    if t is set or t is frozenset:
        return (t.__name__, sorted(_canon(v, pos) for v in x))
    raise TypeError(f"cannot compare a {t.__name__} in a rule set")


def canonical(rs: RuleSet):
    """Everything of a rule set that classifies (all but the compiled regexes), comparable."""
    pos = {id(r): i for i, r in enumerate(rs.rules)}
    rules = [[(f.name, _canon(getattr(r, f.name), pos)) for f in dataclasses.fields(Rule)]
             for r in rs.rules]
    rest = [(f.name, _canon(getattr(rs, f.name), pos)) for f in dataclasses.fields(RuleSet)
            if f.name not in ("rules", "programs", "_compiled", "cached")]
    return rules, rest


# ---- writing (root only) ----

def payload(k: str, rs: RuleSet) -> dict | None:
    """The cache file's object for rule set rs under key k, or None when rs does not read
    back the same (then it is not cached: a verdict must never depend on the cache)."""
    import _sre

    obj = {"format": FORMAT, "key": k, **dump(rs)}
    progs: dict[str, list] = {}
    if _sre.CODESIZE == 4:  # the programs are kept as 32-bit words
        for binary, texts in ((False, rs.literal_src.values()),
                              (True, [t for v in rs.literal_scan_src.values() for t in v])):
            for text in texts:
                prog, key = program(text, binary), ("b:" if binary else "s:") + text
                rx = compile_program(text, prog, binary)
                # re.compile's own steps, so the same regex (test_rule_cache checks it); this
                # run uses it too instead of compiling the text again
                if rx.pattern == (text.encode("utf-8", "replace") if binary else text):
                    progs[key] = prog
                    rs._compiled.setdefault(key, rx)
    obj["programs"] = progs
    try:
        text = shipped_bytes("precedence.yaml").decode("utf-8")
        obj["data"] = {"precedence.yaml": parse_yaml("precedence.yaml", text)}
        back = json.loads(json.dumps(obj))
        if back["data"] != obj["data"] or canonical(restore(back)) != canonical(rs):
            return None
    except (TypeError, ValueError):  # what JSON cannot hold: no cache
        return None
    return back


def save(k: str, rs: RuleSet) -> bool:
    """Write rule set rs as the cache for key k, when root; False when not written."""
    d = cache_dir()
    if d is None or os.geteuid() != 0:
        return False
    try:
        obj = payload(k, rs)
    except Exception as e:  # noqa: BLE001  the cache is an optimisation: never a failure
        _warn(f"the rule cache cannot be built: {e}")
        return False
    if obj is None:
        _warn("the rule set does not read back the same from JSON: not cached")
        return False
    try:
        data = json.dumps(obj, separators=(",", ":")).encode()
        if not os.path.isdir(d):
            os.makedirs(d, mode=0o755, exist_ok=True)
            os.chmod(d, 0o755)  # whatever the umask: users read it
        dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        _warn(f"cannot write the rule cache in {d}: {e}")
        return False
    try:
        if not _trusted(os.fstat(dfd)):
            _warn(f"{d} is not root's or is writable by others: the rule cache is not written")
            return False
        tmp = f".{PREFIX}{k[:16]}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644, dir_fd=dfd)
        try:
            os.fchmod(fd, 0o644)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.close(fd)
            fd = -1
            os.replace(tmp, _name(k), src_dir_fd=dfd, dst_dir_fd=dfd)
        except OSError:  # a full disk, say: no half file left behind
            if fd >= 0:
                os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
        _prune(dfd, _name(k))
        return True
    except OSError as e:
        _warn(f"cannot write the rule cache in {d}: {e}")
        return False
    finally:
        os.close(dfd)


def _prune(dfd: int, keep: str) -> None:
    """Remove the oldest cache files beyond KEEP, and temporary files left by a crash."""
    import time

    files, now = [], time.time()
    for name in os.listdir(dfd):
        if name == keep or not name.lstrip(".").startswith(PREFIX):
            continue
        try:
            mtime = os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mtime
        except OSError:
            continue
        if name.startswith("."):
            if now - mtime > 600:  # another writer's is renamed within seconds
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=dfd)
        else:
            files.append((mtime, name))
    for _, name in sorted(files, reverse=True)[KEEP - 1:]:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dfd)


def _warn(msg: str) -> None:
    import logging

    logging.getLogger(__name__).warning("gpualert rules: %s", msg)
