"""Root reads a job's facts from Slurm's JSON only (issue 28): a name, comment, work dir or
path that holds `Key=Value` text, newlines or 100 KB cannot become a field. On real captured
output of each version (tests/data/slurm/), with the user's free-text fields made hostile."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gpualert_slurm.core import slurm, slurm_records
from gpualert_slurm.hooks.job_epilog.facts import identity_from_env

DATA = Path(__file__).parent / "data" / "slurm"

# Every key scontrol prints for a job (the parser's own list), as a forged record would say it.
EVERY_KEY = " ".join(f"{k}=forged" for k in sorted(slurm_records._KNOWN_JOB_KEYS))
FORGED = ("x UserId=root(0) Account=root Partition=urgent StartTime=2001-01-01T00:00:00 "
          "EndTime=2001-01-01T00:00:01 JobState=NODE_FAIL Reason=NodeDown NodeList=n9 "
          "Restarts=7 ExitCode=0:9 FailedNode=n9 ArrayJobId=1 ArrayTaskId=2 MailUser=x@evil "
          "ExcNodeList=n1 NumNodes=9 ")
HOSTILE = [FORGED, FORGED + EVERY_KEY, "a\nJobId=1 UserId=root(0)\n" + FORGED,
           "y" * 100_000 + " " + FORGED]
FREE_TEXT = ("name", "comment", "current_working_directory", "standard_output",
             "standard_error", "command", "admin_comment", "extra")


def _jobs(version: str) -> list[dict[str, Any]]:
    doc = json.loads((DATA / f"squeue-{version}.json").read_text())
    return [j for j in doc["jobs"] if isinstance(j, dict)]


@pytest.mark.parametrize("version", ["22.05", "24.11"])
@pytest.mark.parametrize("text", HOSTILE, ids=["forged", "every-key", "newlines", "100KB"])
def test_free_text_fields_cannot_become_slurm_fields(version: str, text: str) -> None:
    for job in _jobs(version):
        plain = slurm.job_from_scontrol(slurm.record_from_json(job))
        hostile = copy.deepcopy(job)
        for key in FREE_TEXT:
            hostile[key] = text
        st = slurm.job_from_scontrol(slurm.record_from_json(hostile))
        for field in ("job_id", "state", "exit_code", "reason", "nodes", "user", "partition",
                      "restarts", "alloc_nodes", "failed_node", "derived_exit_code"):
            assert getattr(st, field) == getattr(plain, field), (version, field)
        for key in ("UserId", "Account", "StartTime", "EndTime", "NodeList", "ExcNodeList",
                    "ArrayJobId", "ArrayTaskId", "MailUser"):
            assert st.raw.get(key) == plain.raw.get(key), (version, key)
        assert st.name == text and st.raw["Comment"] == text and st.raw["WorkDir"] == text


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_json_record_says_what_scontrol_text_said(version: str) -> None:
    """The record built from JSON carries the same facts the text gave for a running job."""
    job = _jobs(version)[0]
    st = slurm.job_from_scontrol(slurm.record_from_json(job), source="squeue")
    assert st.state == "RUNNING" and st.user == "gpatest" and st.partition == "debug"
    assert st.nodes and st.nodelist and st.alloc_nodes == len(st.nodes)
    start = slurm.parse_time(st.raw["StartTime"])
    assert start is not None and abs(start - slurm_records.json_number(job["start_time"])) < 1
    assert st.raw["UserId"] == f"gpatest({job['user_id']})"
    assert "ArrayJobId" not in st.raw  # not an array job: no "0" standing for one


def test_completing_flag_reads_as_scontrol_says_it() -> None:
    job = copy.deepcopy(_jobs("24.11")[0])
    job["job_state"] = ["FAILED", "COMPLETING"]
    assert slurm.record_from_json(job)["JobState"] == "COMPLETING"
    job["job_state"] = ["FAILED"]
    assert slurm.record_from_json(job)["JobState"] == "FAILED"


def test_array_task_fields_from_json_numbers() -> None:
    job = copy.deepcopy(_jobs("24.11")[0])
    job["array_job_id"] = {"set": True, "infinite": False, "number": 40}
    job["array_task_id"] = {"set": True, "infinite": False, "number": 0}
    rec = slurm.record_from_json(job)
    assert rec["ArrayJobId"] == "40" and rec["ArrayTaskId"] == "0"


ENV = {"SLURM_JOB_USER": "gpatest", "SLURM_JOB_UID": "1001", "SLURM_JOB_ACCOUNT": "gpa",
       "SLURM_JOB_PARTITION": "debug"}


def test_identity_agrees_with_the_environment_and_nothing_is_said() -> None:
    rec = {"UserId": "gpatest(1001)", "Account": "gpa", "Partition": "debug"}
    out, mismatch = identity_from_env(rec, ENV)
    assert out == rec and mismatch == []


def test_identity_that_disagrees_takes_the_environment_and_says_so() -> None:
    rec = {"UserId": "root(0)", "Account": "root", "Partition": "urgent", "JobName": "x"}
    out, mismatch = identity_from_env(rec, ENV)
    assert out["UserId"] == "gpatest(1001)" and out["Account"] == "gpa"
    assert out["Partition"] == "debug" and out["JobName"] == "x"
    assert len(mismatch) == 4 and any("SLURM_JOB_UID" in m for m in mismatch)


def test_identity_without_an_environment_keeps_the_record() -> None:
    rec = {"UserId": "gpatest(1001)", "Account": "gpa", "Partition": "debug"}
    assert identity_from_env(rec, {}) == (rec, [])


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_a_real_hostile_name_fools_the_text_and_not_the_json(version: str) -> None:
    """Captured on the container clusters (tests/data/slurm/README.md): a job named
    'x UserId=root(0) Account=root Partition=urgent StartTime=2001-... JobState=NODE_FAIL
    Reason=NodeDown' + a newline + 'JobId=1 NodeList=n9'. scontrol -o's text, as the old
    parser read it, says root's NODE_FAIL job; the JSON says what Slurm holds."""
    text = (DATA / f"scontrol-job-hostile-{version}.txt").read_text().splitlines()[0]
    fooled = slurm.job_from_scontrol(slurm.parse_scontrol_record(text))
    assert (fooled.user, fooled.partition, fooled.state) == ("root", "urgent", "NODE_FAIL")
    doc = json.loads((DATA / f"scontrol-job-hostile-{version}.json").read_text())
    st = slurm.job_from_scontrol(slurm.record_from_json(doc["jobs"][0]))
    assert (st.user, st.partition) == ("gpatest", "debug")
    assert st.state in ("PENDING", "RUNNING") and st.reason != "NodeDown"
    assert slurm.parse_time(st.raw["StartTime"]) != slurm.parse_time("2001-01-01T00:00:00")
    assert st.name.startswith("x UserId=root(0)") and "\n" in st.name
    assert st.raw["Comment"] == "ExitCode=0:9 Restarts=7"
    assert st.exit_code == slurm_records.ExitCode(0, 0) and st.restarts == 0


def test_stdout_is_the_expanded_path_where_slurm_gives_it() -> None:
    """25.05+ JSON: standard_output keeps the pattern, stdout_expanded the file opened."""
    job = copy.deepcopy(_jobs("24.11")[0])
    job["standard_output"] = "/w/slurm-%j.out"
    assert slurm.record_from_json(job)["StdOut"] == "/w/slurm-%j.out"
    job["stdout_expanded"] = "/w/slurm-7.out"
    assert slurm.record_from_json(job)["StdOut"] == "/w/slurm-7.out"
