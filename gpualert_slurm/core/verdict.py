"""verdict.json as one type: `VerdictRecord` (one attempt of one job), its `Cause` (the
classifier's answer, JSON key "verdict"), `Evidence` with its `Provenance`, `JobInfo` and
`ArrayRef`. (classify() returns a `Cause`: the classifier's answer is this type.)

The one place that reads verdict.json (`read_at`, `read_run`, `VerdictRecord.from_bytes`) and
the one that writes it (`write_at`, `VerdictRecord.to_json`). Reading never trusts the file: it
is read as root reads a user's directory (fd-relative, no link followed, non-blocking, owner-
and size-checked: spool.read_bytes_nofollow / read_job_bytes), parsed with NaN/Infinity
refused, and every field the readers use is type-checked; anything else is a VerdictError
naming the field. The vocabulary fields read as core/vocab.py's types: a class (`Cause.cls`,
`Evidence.cls`) as a `ClassId`, a domain as a `Domain`, a provenance origin as an `Origin`; a
word outside the vocabulary is a VerdictError too, naming the field, the word and the words
accepted (no fallback: a class this gpualert does not know has no policy, hint or domain, and
an origin it does not know must not be trusted).

Round trip: `VerdictRecord.from_json(d).to_json() == d` for every file the job epilog writes.
A key the file lacks is recorded in `omitted` (so it is not written back as null) and reads as its
default; keys this module does not know are kept in `extra`, written back as they came. The
nested records that only one module reads (options, tasks, nodes, trusted, last_lines, report,
artifacts, recovery) stay JSON objects, checked for their shape only.

`version`: the schema version (VERSION). A file without one was written before versions (0)
and reads the same; a file newer than VERSION is refused.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from gpualert_slurm.core import vocab as _vocab
from gpualert_slurm.core.spool import (
    MAX_RECORD_BYTES,
    SpoolError,
    read_bytes_nofollow,
    read_job_bytes,
    write_json_atomic,
)
from gpualert_slurm.core.vocab import ClassId, Domain, Origin

__all__ = ["VERSION", "FILE", "MAX_BYTES", "VerdictError", "Provenance", "Evidence", "Cause",
           "JobInfo", "ArrayRef", "VerdictRecord", "read_at", "read_run", "write_at"]

VERSION = 1  # the schema version the job epilog writes (hooks.jobspool.VERDICT_VERSION)
FILE = "verdict.json"
MAX_BYTES = MAX_RECORD_BYTES  # a bigger verdict.json is refused before it is parsed
# provenance.label: who a fact comes from (the vocabulary is core/vocab.py's Origin)
ORIGINS = _vocab.ORIGINS


class VerdictError(SpoolError):
    """A verdict.json (or verdict-shaped record) that is not what the job epilog writes;
    str() names the file and the field. A SpoolError, so readers that refuse a bad spool file
    refuse this one the same way."""


_T = TypeVar("_T", bound="_Record")
_W = TypeVar("_W", bound=str)


# ---- field checks: each returns the value as it came (for the round trip) or raises -------

def _fail(where: str, want: str, got: Any) -> VerdictError:
    return VerdictError(f"{where}: expected {want}, got {type(got).__name__}")


def _str(v: Any, where: str) -> str | None:
    if v is None or isinstance(v, str):
        return v
    raise _fail(where, "a string or null", v)


def _word(v: Any, where: str, words: tuple[_W, ...], what: str) -> _W | None:
    """A vocabulary field: null, or one of `words` (a core/vocab.py tuple), returned as that
    word, so it has the vocabulary's type; another string is a VerdictError."""
    s = _str(v, where)
    if s is None:
        return None
    for w in words:
        if w == s:
            return w
    shown = s if len(s) <= 60 else s[:60] + "..."
    raise VerdictError(f"{where}: {shown!r} is not {what} ({', '.join(words)})")


def _class(v: Any, where: str) -> ClassId | None:
    return _word(v, where, _vocab.CLASS_IDS, "a class of classify/classes.yaml")


def _int(v: Any, where: str) -> int | None:
    if v is None or (isinstance(v, int) and not isinstance(v, bool)):
        return v
    raise _fail(where, "an integer or null", v)


def _num(v: Any, where: str) -> float | int | None:
    if v is None:
        return None
    if isinstance(v, int | float) and not isinstance(v, bool):
        if isinstance(v, float) and not math.isfinite(v):
            raise VerdictError(f"{where}: not a finite number")
        return v
    raise _fail(where, "a number or null", v)


def _bool(v: Any, where: str) -> bool | None:
    if v is None or isinstance(v, bool):
        return v
    raise _fail(where, "true, false or null", v)


def _flag(v: Any, where: str) -> bool:
    """failed, silent_failure: the epilog writes true or false, never null."""
    if v is None:  # absent (omitted): not failed
        return False
    if isinstance(v, bool):
        return v
    raise _fail(where, "true or false", v)


def _id(v: Any, where: str) -> str | int | None:
    """A job or task id: the epilog writes Slurm's strings; an integer is taken as it is."""
    if v is None or isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool)):
        return v
    raise _fail(where, "a string, an integer or null", v)


def _obj(v: Any, where: str) -> dict[str, Any] | None:
    if v is None or isinstance(v, dict):
        return v
    raise _fail(where, "an object or null", v)


def _objs(v: Any, where: str) -> tuple[dict[str, Any], ...]:
    if v is None:
        return ()
    if not isinstance(v, list):
        raise _fail(where, "a list", v)
    for i, x in enumerate(v):
        if not isinstance(x, dict):
            raise _fail(f"{where}[{i}]", "an object", x)
    return tuple(v)


def _strs(v: Any, where: str) -> tuple[str, ...]:
    if v is None:
        return ()
    if not isinstance(v, list):
        raise _fail(where, "a list", v)
    for i, x in enumerate(v):
        if not isinstance(x, str):
            raise _fail(f"{where}[{i}]", "a string", x)
    return tuple(v)


def _split(obj: Any, where: str, keys: tuple[str, ...]
           ) -> tuple[dict[str, Any], frozenset[str], dict[str, Any]]:
    """(the object, the known keys it lacks, the keys this module does not know)."""
    if not isinstance(obj, dict):
        raise _fail(where, "an object", obj)
    omitted = frozenset(k for k in keys if k not in obj)
    extra = {k: v for k, v in obj.items() if k not in keys}
    return obj, omitted, extra


def _emit(pairs: list[tuple[str, str, Any]], omitted: frozenset[str],
          extra: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON object: (attribute, key, value) each, but the omitted ones, then `extra`."""
    out = {key: value for attr, key, value in pairs if attr not in omitted}
    for k, v in extra.items():
        out.setdefault(k, v)
    return out


class _Record:
    """What the records share: `replace` (a changed field is written even where the record it
    came from lacked it). Equality compares the fields only (not `omitted`, not `extra`)."""

    omitted: frozenset[str]
    # every record is a @dataclass: declared so that dataclasses.replace accepts one
    __dataclass_fields__: ClassVar[dict[str, Any]]

    def replace(self: _T, **changes: Any) -> _T:
        return dataclasses.replace(self, **changes, omitted=self.omitted - changes.keys())


# ---- the records -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Provenance(_Record):
    """Where one evidence line comes from (core.provenance.label): origin "slurm", "root" or
    "job", the node it is about, and the words the report and the audit log show."""

    origin: Origin | None = None
    node: str | None = None
    label: str | None = None
    omitted: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    KEYS = ("origin", "node", "label")

    @property
    def trusted(self) -> bool:
        """Slurm's or root's: a fact that may act (SECURITY.md); the job's only explains."""
        return self.origin in _vocab.TRUSTED_ORIGINS

    @classmethod
    def from_json(cls, obj: Any, where: str = "provenance") -> Provenance:
        d, omitted, extra = _split(obj, where, cls.KEYS)
        return cls(origin=_word(d.get("origin"), f"{where}.origin", ORIGINS, "an origin"),
                   node=_str(d.get("node"), f"{where}.node"),
                   label=_str(d.get("label"), f"{where}.label"), omitted=omitted, extra=extra)

    def to_json(self) -> dict[str, Any]:
        return _emit([("origin", "origin", self.origin), ("node", "node", self.node),
                      ("label", "label", self.label)], self.omitted, self.extra)


@dataclass(frozen=True)
class Evidence(_Record):
    """One line that supports the cause (or, in `Cause.cascades`, a symptom of it): the file
    ("(slurm)", "(kernel log)", ... for facts that are no log line), its line, the text, the
    rank and class where the classifier names them, and its provenance once annotated."""

    file: str | None = None
    line: int | None = None
    text: str | None = None
    rank: int | None = None
    cls: ClassId | None = None  # cascades: the class of the symptom
    provenance: Provenance | None = None
    omitted: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # a cascade's rank and class come first, as the classifier writes them (its JSON is
    # `gpualert classify --json`'s); an evidence line has neither
    KEYS = ("rank", "cls", "file", "line", "text", "provenance")

    @property
    def origin(self) -> Origin:
        """Who the line comes from; a line without provenance (an older verdict) is the job's."""
        return (self.provenance.origin if self.provenance else None) or "job"

    @property
    def source(self) -> str:
        """The provenance's label ("printed by the job", "kernel log of n2"), or ''."""
        return (self.provenance.label if self.provenance else None) or ""

    @classmethod
    def from_json(cls, obj: Any, where: str = "evidence") -> Evidence:
        d, omitted, extra = _split(obj, where, cls.KEYS)
        p = d.get("provenance")
        return cls(file=_str(d.get("file"), f"{where}.file"),
                   line=_int(d.get("line"), f"{where}.line"),
                   text=_str(d.get("text"), f"{where}.text"),
                   rank=_int(d.get("rank"), f"{where}.rank"),
                   cls=_class(d.get("cls"), f"{where}.cls"),
                   provenance=None if p is None else Provenance.from_json(p, f"{where}.provenance"),
                   omitted=omitted, extra=extra)

    def to_json(self) -> dict[str, Any]:
        return _emit([("rank", "rank", self.rank), ("cls", "cls", self.cls),
                      ("file", "file", self.file), ("line", "line", self.line),
                      ("text", "text", self.text),
                      ("provenance", "provenance",
                       self.provenance.to_json() if self.provenance else None)],
                     self.omitted, self.extra)


def _evidence(v: Any, where: str) -> tuple[Evidence, ...]:
    if v is None:
        return ()
    if not isinstance(v, list):
        raise _fail(where, "a list", v)
    return tuple(Evidence.from_json(x, f"{where}[{i}]") for i, x in enumerate(v))


@dataclass(frozen=True)
class Cause(_Record):
    """The classifier's answer (what classify() returns; verdict.json's "verdict"): the
    class and its domain, how sure, the hint, the evidence, the root rank/node/step, the
    cascades, and which precedence step decided."""

    cls: ClassId | None = None  # JSON "class"
    domain: Domain | None = None
    confidence: float | int | None = None
    hint: str | None = None
    detail: str | None = None
    evidence: tuple[Evidence, ...] = ()
    root_rank: int | None = None
    root_node: str | None = None
    root_step: str | None = None
    cascades: tuple[Evidence, ...] = ()
    silent_failure: bool | None = None
    decided_by: str | None = None
    omitted: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    KEYS = ("class", "domain", "confidence", "hint", "detail", "evidence", "root_rank",
            "root_node", "root_step", "cascades", "silent_failure", "decided_by")

    @property
    def klass(self) -> ClassId:
        """The class id, "unknown" where there is none."""
        return self.cls or "unknown"

    @classmethod
    def from_json(cls, obj: Any, where: str = "verdict") -> Cause:
        d, omitted, extra = _split(obj, where, cls.KEYS)
        omitted = frozenset("cls" if k == "class" else k for k in omitted)
        return cls(cls=_class(d.get("class"), f"{where}.class"),
                   domain=_word(d.get("domain"), f"{where}.domain", _vocab.DOMAINS,
                                "a domain"),
                   confidence=_num(d.get("confidence"), f"{where}.confidence"),
                   hint=_str(d.get("hint"), f"{where}.hint"),
                   detail=_str(d.get("detail"), f"{where}.detail"),
                   evidence=_evidence(d.get("evidence"), f"{where}.evidence"),
                   root_rank=_int(d.get("root_rank"), f"{where}.root_rank"),
                   root_node=_str(d.get("root_node"), f"{where}.root_node"),
                   root_step=_str(d.get("root_step"), f"{where}.root_step"),
                   cascades=_evidence(d.get("cascades"), f"{where}.cascades"),
                   silent_failure=_bool(d.get("silent_failure"), f"{where}.silent_failure"),
                   decided_by=_str(d.get("decided_by"), f"{where}.decided_by"),
                   omitted=omitted, extra=extra)

    def to_json(self) -> dict[str, Any]:
        return _emit([("cls", "class", self.cls), ("domain", "domain", self.domain),
                      ("confidence", "confidence", self.confidence), ("hint", "hint", self.hint),
                      ("detail", "detail", self.detail),
                      ("evidence", "evidence", [e.to_json() for e in self.evidence]),
                      ("root_rank", "root_rank", self.root_rank),
                      ("root_node", "root_node", self.root_node),
                      ("root_step", "root_step", self.root_step),
                      ("cascades", "cascades", [e.to_json() for e in self.cascades]),
                      ("silent_failure", "silent_failure", self.silent_failure),
                      ("decided_by", "decided_by", self.decided_by)], self.omitted, self.extra)


@dataclass(frozen=True)
class JobInfo(_Record):
    """verdict.json's "job": the job as Slurm (and the Prolog's job.json) describe it."""

    name: str | None = None
    user: str | None = None
    uid: int | None = None
    nodes: tuple[str, ...] = ()
    nodelist: str | None = None
    gpus: Mapping[str, Any] = field(default_factory=dict)
    partition: str | None = None
    account: str | None = None
    work_dir: str | None = None
    comment: str | None = None
    mail_user: str | None = None
    start_time: float | int | None = None
    end_time: float | int | None = None
    run_time_s: float | int | None = None
    exit_code: int | None = None
    signal: int | None = None
    slurm_state: str | None = None
    slurm_reason: str | None = None
    slurm_error: str | None = None
    omitted: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    KEYS = ("name", "user", "uid", "nodes", "nodelist", "gpus", "partition", "account",
            "work_dir", "comment", "mail_user", "start_time", "end_time", "run_time_s",
            "exit_code", "signal", "slurm_state", "slurm_reason", "slurm_error")
    _STR = ("name", "user", "nodelist", "partition", "account", "work_dir", "comment",
            "mail_user", "slurm_state", "slurm_reason", "slurm_error")
    _NUM = ("start_time", "end_time", "run_time_s")
    _INT = ("uid", "exit_code", "signal")

    @classmethod
    def from_json(cls, obj: Any, where: str = "job") -> JobInfo:
        d, omitted, extra = _split(obj, where, cls.KEYS)
        kw: dict[str, Any] = {k: _str(d.get(k), f"{where}.{k}") for k in cls._STR}
        kw |= {k: _num(d.get(k), f"{where}.{k}") for k in cls._NUM}
        kw |= {k: _int(d.get(k), f"{where}.{k}") for k in cls._INT}
        kw["nodes"] = _strs(d.get("nodes"), f"{where}.nodes")
        kw["gpus"] = _obj(d.get("gpus"), f"{where}.gpus") or {}
        return cls(**kw, omitted=omitted, extra=extra)

    def to_json(self) -> dict[str, Any]:
        return _emit([(k, k, list(self.nodes) if k == "nodes" else
                       dict(self.gpus) if k == "gpus" else getattr(self, k)) for k in self.KEYS],
                     self.omitted, self.extra)


@dataclass(frozen=True)
class ArrayRef(_Record):
    """verdict.json's "array": the array job this run is a task of."""

    job_id: str | int | None = None
    task_id: str | int | None = None
    omitted: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    KEYS = ("job_id", "task_id")

    @classmethod
    def from_json(cls, obj: Any, where: str = "array") -> ArrayRef:
        d, omitted, extra = _split(obj, where, cls.KEYS)
        return cls(job_id=_id(d.get("job_id"), f"{where}.job_id"),
                   task_id=_id(d.get("task_id"), f"{where}.task_id"), omitted=omitted,
                   extra=extra)

    def to_json(self) -> dict[str, Any]:
        return _emit([("job_id", "job_id", self.job_id), ("task_id", "task_id", self.task_id)],
                     self.omitted, self.extra)


def _trusted(v: Any, where: str) -> dict[str, Any] | None:
    """Slurm's and root's facts (provenance.node_trust): only their shape is checked here;
    core.provenance reads them."""
    t = _obj(v, where)
    if t is not None:
        _obj(t.get("slurm"), f"{where}.slurm")
        nodes = _obj(t.get("nodes"), f"{where}.nodes") or {}
        for n, rec in nodes.items():
            _obj(rec, f"{where}.nodes.{n}")
    return t


def _last_lines(v: Any, where: str) -> dict[str, Any] | None:
    d = _obj(v, where)
    if d is not None:
        _str(d.get("file"), f"{where}.file")
        _strs(d.get("lines"), f"{where}.lines")
    return d


def _artifacts(v: Any, where: str) -> dict[str, Any] | None:
    d = _obj(v, where)
    if d is not None:
        _objs(d.get("attached"), f"{where}.attached")
        _objs(d.get("left_out"), f"{where}.left_out")
    return d


def _node_summaries(v: Any, where: str) -> dict[str, Any]:
    d = _obj(v, where) or {}
    for n, rec in d.items():
        _obj(rec, f"{where}.{n}")
    return d


@dataclass(frozen=True)
class VerdictRecord(_Record):
    """One attempt of one job, as the job epilog decided and reported it (verdict.json)."""

    version: int = VERSION
    job_id: str | int | None = None
    attempt: int = 0
    attempt_path: str | None = None
    logs_dir: str | None = None
    array: ArrayRef | None = None
    job: JobInfo = field(default_factory=JobInfo)
    options: Mapping[str, Any] | None = None
    failed: bool = False
    silent_failure: bool = False
    cause: Cause = field(default_factory=Cause)  # JSON "verdict"
    classifier_error: str | None = None
    tasks: tuple[Mapping[str, Any], ...] = ()
    nodes: Mapping[str, Any] = field(default_factory=dict)
    trusted: Mapping[str, Any] | None = None
    last_lines: Mapping[str, Any] | None = None
    notes: tuple[str, ...] = ()
    time: float | int | None = None
    report: Mapping[str, Any] | None = None
    artifacts: Mapping[str, Any] | None = None
    recovery: Mapping[str, Any] | None = None
    decision_id: str | None = None  # the hang watcher's made-up verdicts: the audit id
    omitted: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # (attribute, JSON key)
    FIELDS = (("version", "version"), ("job_id", "job_id"), ("attempt", "attempt"),
              ("attempt_path", "attempt_path"), ("logs_dir", "logs_dir"), ("array", "array"),
              ("job", "job"), ("options", "options"), ("failed", "failed"),
              ("silent_failure", "silent_failure"), ("cause", "verdict"),
              ("classifier_error", "classifier_error"), ("tasks", "tasks"), ("nodes", "nodes"),
              ("trusted", "trusted"), ("last_lines", "last_lines"), ("notes", "notes"),
              ("time", "time"), ("report", "report"), ("artifacts", "artifacts"),
              ("recovery", "recovery"), ("decision_id", "decision_id"))

    # ---- what readers ask -----------------------------------------------------------------

    @property
    def failed_or_silent(self) -> bool:
        """The job failed, or exited 0 with a log that ends in a failure: worth a report."""
        return self.failed or self.silent_failure

    @property
    def label(self) -> str:
        """'123', or '120_3' for an array task (the parent array id first)."""
        a = self.array
        if a is not None and a.job_id and a.task_id is not None:
            return f"{a.job_id}_{a.task_id}"
        return str(self.job_id)

    # ---- reading --------------------------------------------------------------------------

    @classmethod
    def from_json(cls, obj: Any, where: str = FILE) -> VerdictRecord:
        """The verdict a parsed verdict.json says; VerdictError where a field the readers use
        has the wrong type, or the version is newer than VERSION."""
        keys = tuple(k for _a, k in cls.FIELDS)
        d, omitted_keys, extra = _split(obj, where, keys)
        by_key = {k: a for a, k in cls.FIELDS}
        omitted = frozenset(by_key[k] for k in omitted_keys)
        version = _int(d.get("version"), f"{where}: version")
        if version is None:
            version = 0  # written before versions: read the same
        if version > VERSION:
            raise VerdictError(f"{where}: version {version} is newer than this gpualert reads "
                               f"({VERSION})")
        w = f"{where}: "
        attempt = _int(d.get("attempt"), w + "attempt") or 0
        failed = _flag(d.get("failed"), w + "failed")
        silent = _flag(d.get("silent_failure"), w + "silent_failure")
        arr = d.get("array")
        job = d.get("job")
        cause = d.get("verdict")
        return cls(
            version=version, job_id=_id(d.get("job_id"), w + "job_id"), attempt=attempt,
            attempt_path=_str(d.get("attempt_path"), w + "attempt_path"),
            logs_dir=_str(d.get("logs_dir"), w + "logs_dir"),
            array=None if arr is None else ArrayRef.from_json(arr, w + "array"),
            job=JobInfo.from_json({} if job is None else job, w + "job"),
            options=_obj(d.get("options"), w + "options"),
            failed=failed, silent_failure=silent,
            cause=Cause.from_json({} if cause is None else cause, w + "verdict"),
            classifier_error=_str(d.get("classifier_error"), w + "classifier_error"),
            tasks=_objs(d.get("tasks"), w + "tasks"),
            nodes=_node_summaries(d.get("nodes"), w + "nodes"),
            trusted=_trusted(d.get("trusted"), w + "trusted"),
            last_lines=_last_lines(d.get("last_lines"), w + "last_lines"),
            notes=_strs(d.get("notes"), w + "notes"), time=_num(d.get("time"), w + "time"),
            report=_obj(d.get("report"), w + "report"),
            artifacts=_artifacts(d.get("artifacts"), w + "artifacts"),
            recovery=_obj(d.get("recovery"), w + "recovery"),
            decision_id=_str(d.get("decision_id"), w + "decision_id"),
            omitted=omitted, extra=extra)

    @classmethod
    def from_bytes(cls, data: bytes, where: str = FILE) -> VerdictRecord:
        """Parse and check a verdict.json's bytes: over MAX_BYTES, not UTF-8, not JSON (NaN and
        Infinity included), nested past the parser's depth, or of the wrong shape: a
        VerdictError that says which."""
        if len(data) > MAX_BYTES:
            raise VerdictError(f"{where}: {len(data)} bytes, more than {MAX_BYTES}: refused")
        try:
            obj = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
        except (ValueError, UnicodeDecodeError) as e:
            raise VerdictError(f"{where}: not valid JSON: {e}") from None
        except RecursionError:
            raise VerdictError(f"{where}: nested too deep: refused") from None
        return cls.from_json(obj, where)

    @classmethod
    def of(cls, v: VerdictRecord | Mapping[str, Any]) -> VerdictRecord:
        """A VerdictRecord as it is, or a verdict-shaped mapping (one the epilog has not saved yet,
        the hang watcher's, a test's) read as a verdict.json would be."""
        return v if isinstance(v, VerdictRecord) else cls.from_json(dict(v), "verdict")

    # ---- writing --------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The JSON object verdict.json holds (write_at writes it, keys sorted)."""
        def out(attr: str) -> Any:
            x = getattr(self, attr)
            if attr in ("array", "job", "cause"):
                return None if x is None else x.to_json()
            if attr in ("tasks", "notes"):
                return list(x)
            if attr == "nodes":
                return dict(x)
            return x
        return _emit([(a, k, out(a)) for a, k in self.FIELDS], self.omitted, self.extra)

    def dumps(self) -> str:
        """verdict.json's text, as spool.write_json_atomic writes it."""
        return json.dumps(self.to_json(), indent=1, sort_keys=True)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


# ---- the files -------------------------------------------------------------------------------

def read_at(dir_fd: int, owners: tuple[int, ...] | None = (0,)) -> VerdictRecord:
    """The verdict.json in the attempt directory dir_fd, root's by default (the job epilog
    writes it as root: anyone else's file is not ours), read fd-relative, no link followed,
    non-blocking, at most MAX_BYTES. FileNotFoundError while there is none; SpoolError
    (VerdictError) when it is not one to trust."""
    return VerdictRecord.from_bytes(read_bytes_nofollow(FILE, dir_fd, MAX_BYTES, owners=owners))


def read_run(spool: str, jobid: str | int, attempt: int) -> VerdictRecord:
    """The verdict.json the job epilog (root) wrote for jobid's attempt, read from the spool
    root down by fds (spool.read_job_bytes), and only if it says it is about that job and
    attempt (a root file the user moved between their attempt dirs is not taken for another
    one). OSError/SpoolError else."""
    v = VerdictRecord.from_bytes(read_job_bytes(spool, jobid, FILE, attempt, limit=MAX_BYTES))
    if str(v.job_id) != str(jobid) or v.attempt != int(attempt):
        raise SpoolError(f"verdict.json of {jobid} attempt {attempt} is about another run: "
                         "refused")
    return v


def write_at(dir_fd: int, v: VerdictRecord, uid: int = -1, gid: int = -1) -> None:
    """verdict.json in the attempt directory dir_fd, atomically (rename), 0644: the one
    writer."""
    write_json_atomic(dir_fd, FILE, v.to_json(), 0o644, uid, gid)
