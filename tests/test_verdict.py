"""core.verdict: the one reader and writer of verdict.json. Round trips (what the job epilog,
its fallback and the hang watcher write, and the real classifier's answer with provenance),
a file of an earlier version, and hostile files (wrong types, huge, deep, not JSON, NaN, not
root's, a symlink): each a clear VerdictError/SpoolError, nothing taken from it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gpualert_slurm.classify import JobFacts, TaskInput, classify
from gpualert_slurm.core import provenance
from gpualert_slurm.core import verdict as V
from gpualert_slurm.core.spool import SpoolError, opened_dir, write_json_atomic

# as hooks/job_epilog/verdict.build_verdict writes it: every key, nulls where it has nothing
FULL: dict[str, Any] = {
    "version": 1, "job_id": "4242", "attempt": 1, "attempt_path": "/spool/4242/attempt-1",
    "logs_dir": "/spool/4242/attempt-1/tasks", "array": {"job_id": "4240", "task_id": "2"},
    "job": {"name": "train", "user": "alice", "uid": 1000, "nodes": ["n1", "n2"],
            "nodelist": "n[1-2]", "gpus": {"n1": "0,1", "n2": None}, "partition": "gpu",
            "account": None, "work_dir": "/home/alice", "comment": None, "mail_user": "a@b",
            "start_time": 1_800_000_000, "end_time": 1_800_000_100.5, "run_time_s": 100.5,
            "exit_code": 1, "signal": 0, "slurm_state": "FAILED",
            "slurm_reason": "NonZeroExitCode", "slurm_error": None},
    "options": {"mail": ["a@b"], "notify": "failure"},
    "failed": True, "silent_failure": False,
    "verdict": {"class": "gpu_hardware", "domain": "infrastructure", "confidence": 0.95,
                "hint": "drain it", "detail": "Xid 79",
                "evidence": [{"file": "(kernel log)", "line": None,
                              "text": "n2: NVRM: Xid (PCI:0000:3b:00): 79",
                              "provenance": {"origin": "root", "node": "n2",
                                             "label": "kernel log of n2"}}],
                "root_rank": 1, "root_node": "n2", "root_step": "0",
                "cascades": [{"rank": 0, "cls": "nccl_error", "file": "/s/0.0.log", "line": 9,
                              "text": "NCCL error", "provenance": {
                                  "origin": "job", "node": None, "label": "printed by the job"}}],
                "silent_failure": False, "decided_by": "hardware"},
    "classifier_error": None,
    "tasks": [{"step": "0", "rank": 0, "node": "n1", "exit": {"exit_code": 1}}],
    "nodes": {"n1": {"verdict": None, "kernel": None}, "n2": None},
    "trusted": {"slurm": {"nodes": ["n1", "n2"], "state": "FAILED"},
                "nodes": {"n2": {"verified": True, "origin": "root", "driver": []}}},
    "last_lines": {"file": "/s/0.1.log", "lines": ["x", "y"]},
    "notes": ["node n1: no node verdict"], "time": 1_800_000_101.25,
    "recovery": {"outcome": "planned", "planned": []},
    "artifacts": {"budget": 100, "used": 10, "attached": [{"name": "a", "size": 10}],
                  "left_out": []},
    "report": {"status": "sent", "reason": None, "subject": "[gpualert] FAILED job 4242"},
}

# hooks/job_epilog/verdict.fallback_verdict: far fewer keys, none of them to be added back
FALLBACK: dict[str, Any] = {
    "version": 1, "job_id": "7", "attempt": 0, "attempt_path": "/spool/7",
    "logs_dir": "/spool/7/tasks",
    "job": {"name": None, "user": "bob", "nodelist": "n1", "exit_code": 1, "signal": 0,
            "work_dir": None},
    "failed": True, "silent_failure": False,
    "verdict": {"class": "unknown", "domain": "unknown", "confidence": 0.0,
                "hint": "gpualert could not analyse this job; its logs are complete.",
                "detail": "gpualert error: RuntimeError: x"},
    "tasks": [], "notes": ["gpualert error while writing this report: RuntimeError('x')"]}

# recovery/watch.py's made-up verdict of a hung job
HANG: dict[str, Any] = {
    "job_id": "9", "attempt": 0, "failed": True, "decision_id": "9.0.hang",
    "job": {"nodes": ["n1"], "partition": "gpu", "user": "carol", "work_dir": None,
            "end_time": 1_800_000_000.0},
    "options": {}, "verdict": {"class": "hang", "domain": "unknown", "root_node": None,
                               "evidence": [{"file": "/s/0.0.log", "line": None,
                                             "text": "no output from any rank for 60 s"}]}}


def dumped(d: dict[str, Any]) -> str:
    return json.dumps(d, indent=1, sort_keys=True)


@pytest.mark.parametrize("d", [FULL, FALLBACK, HANG], ids=["full", "fallback", "hang"])
def test_round_trip_is_byte_identical(d: dict[str, Any]) -> None:
    v = V.VerdictRecord.from_json(json.loads(json.dumps(d)))
    assert v.to_json() == d
    assert v.dumps() == dumped(d)
    assert V.VerdictRecord.from_bytes(v.dumps().encode()) == v


def test_typed_fields_read_what_the_file_says() -> None:
    v = V.VerdictRecord.from_json(FULL)
    assert (v.job_id, v.attempt, v.label, v.failed_or_silent) == ("4242", 1, "4240_2", True)
    assert v.job.nodes == ("n1", "n2") and v.job.end_time == 1_800_000_100.5
    c = v.cause
    assert (c.cls, c.domain, c.root_rank, c.root_node, c.decided_by) == \
        ("gpu_hardware", "infrastructure", 1, "n2", "hardware")
    e = c.evidence[0]
    assert (e.origin, e.source, e.provenance and e.provenance.trusted) == \
        ("root", "kernel log of n2", True)
    assert c.cascades[0].cls == "nccl_error" and c.cascades[0].origin == "job"
    assert v.report is not None and v.report["status"] == "sent"


def test_replace_writes_a_field_the_record_lacked() -> None:
    v = V.VerdictRecord.from_json(FALLBACK)
    assert "report" not in v.to_json()
    w = v.replace(report={"status": "sent"}, notes=(*v.notes, "later"))
    assert w.to_json()["report"] == {"status": "sent"} and w.to_json()["notes"][-1] == "later"
    assert "array" not in w.to_json() and "options" not in w.to_json()  # still as it came
    assert v.to_json() == FALLBACK  # frozen: the one it came from is unchanged


def test_an_older_file_without_version_reads_the_same() -> None:
    old = {k: x for k, x in FULL.items() if k != "version"}
    v = V.VerdictRecord.from_json(old)
    assert v.version == 0 and v.cause.cls == "gpu_hardware" and v.job.user == "alice"
    assert v.to_json() == old  # no version added on the way back


def test_keys_it_does_not_know_come_back_as_they_were() -> None:
    d = dict(FULL, future={"x": [1, 2]}, verdict=dict(FULL["verdict"], silent=True))
    v = V.VerdictRecord.from_json(d)
    assert v.extra == {"future": {"x": [1, 2]}} and v.cause.extra == {"silent": True}
    assert v.to_json() == d


def test_a_newer_version_is_refused() -> None:
    with pytest.raises(V.VerdictError, match="version 2 is newer"):
        V.VerdictRecord.from_json(dict(FULL, version=V.VERSION + 1))


def assert_refused(path: tuple[Any, ...], bad: Any, msg: str) -> None:
    """FULL with `bad` at `path` is refused, the error naming the field."""
    d = json.loads(json.dumps(FULL))
    at = d
    for p in path[:-1]:
        at = at[p]
    at[path[-1]] = bad
    with pytest.raises(V.VerdictError) as e:
        V.VerdictRecord.from_json(d)
    assert msg in str(e.value) and str(e.value).startswith("verdict.json: ")


@pytest.mark.parametrize("path,bad,msg", [
    (("job_id",), ["4242"], "job_id: expected a string, an integer or null, got list"),
    (("attempt",), "1", "attempt: expected an integer or null, got str"),
    (("failed",), "yes", "failed: expected true or false, got str"),
    (("job",), ["alice"], "job: expected an object, got list"),
    (("job", "nodes"), "n1,n2", "job.nodes: expected a list, got str"),
    (("job", "uid"), True, "job.uid: expected an integer or null, got bool"),
    (("verdict",), "gpu_hardware", "verdict: expected an object, got str"),
    (("verdict", "class"), 5, "verdict.class: expected a string or null, got int"),
    (("verdict", "root_rank"), "1", "verdict.root_rank: expected an integer or null"),
    (("verdict", "evidence"), {"file": "x"}, "verdict.evidence: expected a list, got dict"),
    (("verdict", "evidence", 0, "provenance"), "root",
     "verdict.evidence[0].provenance: expected an object, got str"),
    (("verdict", "cascades", 0, "line"), 9.5, "verdict.cascades[0].line: expected an integer"),
    (("trusted", "nodes"), ["n2"], "trusted.nodes: expected an object or null, got list"),
    (("notes",), [1], "notes[0]: expected a string, got int"),
    (("artifacts", "attached"), [["a", 1]], "artifacts.attached[0]: expected an object"),
    (("tasks",), [None], "tasks[0]: expected an object"),
])
def test_wrong_types_are_refused_naming_the_field(path: tuple[Any, ...], bad: Any,
                                                  msg: str) -> None:
    assert_refused(path, bad, msg)


@pytest.mark.parametrize("path,bad,msg", [
    (("verdict", "class"), "gpu_broken",
     "verdict.class: 'gpu_broken' is not a class of classify/classes.yaml (cancelled, "),
    (("verdict", "domain"), "gpu",
     "verdict.domain: 'gpu' is not a domain (workload, infrastructure, scheduler, unknown, none)"),
    (("verdict", "evidence", 0, "provenance", "origin"), "munge",
     "verdict.evidence[0].provenance.origin: 'munge' is not an origin (slurm, root, job)"),
    (("verdict", "cascades", 0, "cls"), "NCCL",
     "verdict.cascades[0].cls: 'NCCL' is not a class of classify/classes.yaml"),
    (("verdict", "cascades", 0, "provenance", "origin"), "Root", "is not an origin"),
])
def test_a_word_outside_the_vocabulary_is_refused_naming_it(path: tuple[Any, ...], bad: str,
                                                             msg: str) -> None:
    """class, domain and provenance origin read as core/vocab.py's ClassId, Domain and Origin:
    a word the vocabulary lacks (a typo, a newer gpualert's class) is no fallback but a
    VerdictError naming the field, the word and the words accepted."""
    assert_refused(path, bad, msg)


def test_the_vocabulary_fields_read_as_the_vocabulary_s_words() -> None:
    from gpualert_slurm.core import vocab

    c = V.VerdictRecord.from_json(FULL).cause
    assert c.cls in vocab.CLASS_IDS and c.domain in vocab.DOMAINS
    assert c.cascades[0].cls in vocab.CLASS_IDS
    assert {e.origin for e in (*c.evidence, *c.cascades)} <= set(vocab.ORIGINS)
    # null stays null (a fallback verdict's evidence, a record from before provenance)
    bare = V.Cause.from_json({"class": None, "domain": None,
                              "evidence": [{"text": "x", "provenance": {"origin": None}}]})
    assert (bare.cls, bare.domain, bare.klass) == (None, None, "unknown")
    assert bare.evidence[0].origin == "job"
    # a long word is shown cut, not whole
    with pytest.raises(V.VerdictError, match=r"'y{60}\.\.\.' is not a domain"):
        V.Cause.from_json({"domain": "y" * 5000})


@pytest.mark.parametrize("data,msg", [
    (b"{\"job_id\": \"1\"", "not valid JSON"),
    (b"\xff\xfe{}", "not valid JSON"),
    (b"[1, 2]", "expected an object, got list"),
    (b"{\"job_id\": \"1\", \"time\": NaN}", "NaN is not a JSON number"),
    (b"{\"job_id\": \"1\", \"time\": 1e999}", "time: not a finite number"),
    (b"{\"job_id\": \"1\", \"extra\": " + b"[" * 200_000 + b"]" * 200_000 + b"}",
     "nested too deep"),
    (b"{\"job_id\": \"" + b"1" * (V.MAX_BYTES + 1) + b"\"}", "more than"),
])
def test_hostile_bytes_are_a_clear_error(data: bytes, msg: str) -> None:
    with pytest.raises(V.VerdictError, match=msg):
        V.VerdictRecord.from_bytes(data)


def test_the_real_classifier_answer_round_trips(tmp_path: Path) -> None:
    """classify()'s Cause.to_json() with the provenance the job epilog puts on it: a Cause, and
    back, byte for byte."""
    log = tmp_path / "0.0.log"
    log.write_text("step 1\ntorch.cuda.OutOfMemoryError: CUDA out of memory. Tried to "
                   "allocate 2.00 GiB\n")
    out = classify([TaskInput(path=str(log), rank=0, node="n1", exit_code=1)],
                   JobFacts(exit_code=1, slurm_state="FAILED")).to_json()
    provenance.annotate(out, {"slurm": {"nodes": ["n1"], "state": "FAILED"}, "nodes": {}})
    c = V.Cause.from_json(out)
    assert c.cls == "cuda_oom" and c.evidence and c.evidence[0].origin == "job"
    assert c.evidence[0].source == provenance.LABEL_JOB
    assert dumped(c.to_json()) == dumped(out)


def _attempt_dir(tmp_path: Path) -> Path:
    d = tmp_path / "a"
    d.mkdir()
    return d


def test_read_at_takes_roots_file_and_write_at_writes_it(tmp_path: Path) -> None:
    d = _attempt_dir(tmp_path)
    with opened_dir(str(d)) as fd:
        V.write_at(fd, V.VerdictRecord.from_json(FULL))
        assert (d / "verdict.json").read_text() == dumped(FULL) + "\n"
        assert (d / "verdict.json").stat().st_mode & 0o777 == 0o644
        assert V.read_at(fd, owners=(os.getuid(),)).to_json() == FULL
        with pytest.raises(FileNotFoundError):
            V.read_at(os.open(str(tmp_path), os.O_RDONLY))  # no verdict.json there


def test_read_at_refuses_a_link_and_anyone_elses_file(tmp_path: Path) -> None:
    d = _attempt_dir(tmp_path)
    (tmp_path / "elsewhere.json").write_text(dumped(FULL))
    (d / "verdict.json").symlink_to(tmp_path / "elsewhere.json")
    with opened_dir(str(d)) as fd:
        with pytest.raises(OSError):  # O_NOFOLLOW: ELOOP
            V.read_at(fd, owners=None)
        os.unlink("verdict.json", dir_fd=fd)
        write_json_atomic(fd, "verdict.json", FULL)
        other = os.getuid() + 1
        with pytest.raises(SpoolError, match="owned by uid"):
            V.read_at(fd, owners=(other,))


def test_read_run_wants_the_run_it_is_asked_about(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    (spool / "4242" / "attempt-1").mkdir(parents=True)
    os.chmod(spool, 0o755)
    with opened_dir(str(spool / "4242" / "attempt-1")) as fd:
        V.write_at(fd, V.VerdictRecord.from_json(FULL))  # root's (the tests run as root)
    assert V.read_run(str(spool), "4242", 1).cause.cls == "gpu_hardware"
    with pytest.raises(FileNotFoundError):
        V.read_run(str(spool), "4242", 2)  # no attempt-2
    with opened_dir(str(spool / "4242")) as fd:
        V.write_at(fd, V.VerdictRecord.from_json(FULL))  # attempt 1's record in attempt 0's place
    with pytest.raises(SpoolError, match="about another run"):
        V.read_run(str(spool), "4242", 0)
    with pytest.raises(SpoolError, match="bad job id"):
        V.read_run(str(spool), "../4242", 1)


def test_of_reads_an_in_memory_mapping_as_a_file() -> None:
    v = V.VerdictRecord.of(HANG)
    assert V.VerdictRecord.of(v) is v and v.decision_id == "9.0.hang" and v.cause.cls == "hang"
    with pytest.raises(V.VerdictError):
        V.VerdictRecord.of({"verdict": {"evidence": "x"}})
