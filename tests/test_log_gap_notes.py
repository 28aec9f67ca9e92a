"""The report says what the tap could not log (the exit records' log_gaps / log_flushed, written
by the plugin when the spool lagged or stalled): the user learns that the evidence may be short
and that Slurm's own output file has every byte."""

from __future__ import annotations

from gpualert_slurm.hooks.job_epilog.facts import MAX_GAP_NOTES, log_flushed, log_gap_notes
from gpualert_slurm.hooks.jobspool import TaskLog
from gpualert_slurm.report import render


def task(name: str, **exit_fields) -> TaskLog:
    step, rank = name.split(".")[:2]
    rec = {"exit_code": 0, "signal": None, "log_flushed": True, "log_bytes": 10,
           "log_gaps": 0, "log_gap_bytes": 0, "log_first_gap": -1} | exit_fields
    return TaskLog(name=name, step=step, rank=int(rank), fd=-1, size=10, mtime=0.0,
                   path=f"/spool/1/tasks/{name}", exit=rec)


def test_gaps_and_an_incomplete_log_are_said_a_clean_or_untapped_task_is_not() -> None:
    notes = log_gap_notes([
        task("batch.0.log", log_gaps=2, log_gap_bytes=16777216, log_flushed=False),
        task("0.1.log", log_flushed=False),
        task("0.2.log"),
        task("0.3.log", log_flushed=None, log_gaps=None, log_gap_bytes=None),  # untapped
    ])
    assert len(notes) == 2, notes
    assert notes[0].startswith("batch.0.log: 16777216 bytes of the task's output are not in "
                               "this log (2 gap(s)")
    assert "own output file has them" in notes[0]
    assert notes[1].startswith("0.1.log: the log was not complete when the task ended")


def test_an_exit_record_of_the_version_before_says_log_drained() -> None:
    """Records an older plugin wrote (still in the spool after an upgrade) name the field
    log_drained; they are read alike."""
    def old(name: str, drained: bool | None) -> TaskLog:
        t = task(name)
        assert t.exit is not None
        del t.exit["log_flushed"]
        t.exit["log_drained"] = drained
        return t

    assert log_flushed({"log_drained": False}) is False
    assert log_flushed({"log_drained": True}) is True
    assert log_flushed({"log_drained": None}) is None
    assert log_flushed({}) is None
    notes = log_gap_notes([old("0.0.log", False), old("0.1.log", True), old("0.2.log", None)])
    assert len(notes) == 1 and notes[0].startswith("0.0.log: the log was not complete"), notes


def test_many_tasks_with_gaps_are_summed_up() -> None:
    notes = log_gap_notes([task(f"0.{r}.log", log_gaps=1, log_gap_bytes=100) for r in range(9)])
    assert len(notes) == MAX_GAP_NOTES
    assert notes[-1].startswith(f"{9 - MAX_GAP_NOTES + 1} more task logs")


def test_the_note_reaches_the_mail_text() -> None:
    note = log_gap_notes([task("0.0.log", log_gaps=1, log_gap_bytes=4096)])[0]
    v = {"job_id": "1", "verdict": {"class": "success"}, "job": {}, "notes": [note]}
    assert f"Note: {note}" in render(v, "text")
