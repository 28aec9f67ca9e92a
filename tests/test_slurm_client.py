"""gpualert_slurm.core.slurm: parsers on real captured output, error handling, and the client
against the real cluster."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import clusterlib
import pytest
from clusterlib import ClusterFacts, submit, wait_final, wait_state

from gpualert_slurm.core import slurm
from gpualert_slurm.core.slurm import SlurmError
from gpualert_slurm.core.slurm_records import ExitCode, json_format, parse_sacct_json

DATA = Path(__file__).parent / "data" / "slurm"


# ---------------------------------------------------------------------------------------------
# scontrol show job -o (captured on Slurm 22.05.8)


def test_scontrol_values_with_spaces_and_equals_signs_stay_whole() -> None:
    line = (DATA / "scontrol-job-22.05.txt").read_text().splitlines()[0]
    rec = slurm.parse_scontrol_record(line)
    assert rec["JobName"] == "job name X=1"
    assert rec["Command"] == "/var/lib/gpualert-cluster/work/manual/my script.sh --lr=0.1 Foo=bar"
    # The comment holds "Reason=", a real key, which must not end the comment...
    assert rec["Comment"] == "my comment Reason=fake ok"
    # ...nor replace the real Reason.
    assert rec["Reason"] == "None"
    assert rec["TRES"] == "cpu=1,mem=376M,node=1,billing=1"
    assert rec["AllocNode:Sid"] == "localhost:3763"
    assert rec["StdErr"] == "/var/lib/gpualert-cluster/work/manual/slurm-6.out"
    assert rec["Power"] == ""
    assert "Foo" not in rec and "X" not in rec


def test_scontrol_record_becomes_a_job_state() -> None:
    line = (DATA / "scontrol-job-22.05.txt").read_text().splitlines()[0]
    st = slurm.job_from_scontrol(slurm.parse_scontrol_record(line))
    assert (st.job_id, st.state, st.user, st.partition) == (6, "RUNNING", "gpatest", "debug")
    assert st.nodes == ("n1",) and st.exit_code == ExitCode(0, 0) and not st.final
    assert st.source == "scontrol"


def test_scontrol_multi_node_record() -> None:
    line = (DATA / "scontrol-job-22.05.txt").read_text().splitlines()[1]
    st = slurm.job_from_scontrol(slurm.parse_scontrol_record(line))
    assert st.name == "two nodes" and st.nodes == ("n1", "n2") and st.alloc_nodes == 2


def test_scontrol_unknown_keys_of_newer_versions_still_split() -> None:
    rec = slurm.parse_scontrol_record(
        "JobId=7 NewKey2030=abc JobName=x JobState=FAILED Reason=NonZeroExitCode ExitCode=2:0 "
        "Command=/bin/run a b=c OtherNew=1 WorkDir=/tmp")
    assert rec["NewKey2030"] == "abc"
    assert rec["Command"] == "/bin/run a b=c OtherNew=1"  # unknown key inside free text: value
    assert rec["WorkDir"] == "/tmp"
    st = slurm.job_from_scontrol(rec)
    assert (st.state, st.reason, st.exit_code) == ("FAILED", "NonZeroExitCode", ExitCode(2, 0))


@pytest.mark.parametrize("bad", ["no pairs here", " =x", "lower case=1 but not first"])
def test_scontrol_garbage_is_a_clear_error(bad: str) -> None:
    with pytest.raises(SlurmError, match="key=value"):
        slurm.parse_scontrol_record(bad)


# ---------------------------------------------------------------------------------------------
# exit codes, node lists


def test_exit_code_parsing_and_wait_status() -> None:
    assert ExitCode.parse("0:125") == ExitCode(0, 125)
    assert ExitCode.parse("3") == ExitCode(3, 0)
    assert str(ExitCode(1, 9)) == "1:9"
    assert ExitCode.from_wait_status(3 << 8) == ExitCode(3, 0)
    assert ExitCode.from_wait_status(9) == ExitCode(0, 9)
    assert ExitCode(0, 0).ok and not ExitCode(0, 15).ok
    with pytest.raises(SlurmError, match="exit:signal"):
        ExitCode.parse("one:two")


def test_hostlist_expansion() -> None:
    assert slurm.expand_hostlist("n[1-3]") == ["n1", "n2", "n3"]
    assert slurm.expand_hostlist("gpu[01,05-06],login") == ["gpu01", "gpu05", "gpu06", "login"]
    assert slurm.expand_hostlist("rack[1-2]-n[1-2]") == ["rack1-n1", "rack1-n2",
                                                         "rack2-n1", "rack2-n2"]
    assert slurm.expand_hostlist("(null)") == [] and slurm.expand_hostlist("") == []
    for bad in ("n[1-3", "n[3-1]", "n[a-b]", "n]1["):
        with pytest.raises(SlurmError, match="node"):
            slurm.expand_hostlist(bad)


# ---------------------------------------------------------------------------------------------
# sacct / squeue (captured on 22.05.8; the 24.x JSON shape is written from its data_parser)


def test_sacct_table_parses_jobs_with_their_steps() -> None:
    jobs = {j.job_id: j for j in slurm.parse_sacct_table((DATA / "sacct-table-22.05.txt")
                                                         .read_text())}
    assert sorted(jobs) == [2, 3, 6, 24, 96]
    assert (jobs[2].state, jobs[2].exit_code) == ("OUT_OF_MEMORY", ExitCode(0, 125))
    assert (jobs[3].state, jobs[3].nodes) == ("PREEMPTED", ("n1", "n2", "n3"))
    assert jobs[3].steps[0].state == "CANCELLED" and jobs[3].steps[0].exit_code.signal == 15
    assert jobs[6].state == "CANCELLED" and jobs[6].name == "job name X=1"  # "CANCELLED by 0"
    assert (jobs[24].state, jobs[24].exit_code) == ("FAILED", ExitCode(3, 0))
    assert [s.step for s in jobs[96].steps] == ["batch", "0"]
    assert jobs[96].steps[1].nodes == ("n1", "n2", "n3") and jobs[96].alloc_nodes == 3
    assert all(j.final and j.source == "sacct" for j in jobs.values())


def test_sacct_table_with_wrong_field_count_is_a_clear_error() -> None:
    with pytest.raises(SlurmError, match="expected 11 fields"):
        slurm.parse_sacct_table("12\x1fCOMPLETED\x1f0:0\n")


def test_sacct_json_22_05() -> None:
    jobs = {j.job_id: j for j in parse_sacct_json((DATA / "sacct-22.05.json").read_text())}
    assert jobs[2].state == "OUT_OF_MEMORY" and jobs[2].exit_code == ExitCode(0, 125)
    assert jobs[96].nodes == ("n1", "n2", "n3")
    assert [s.step for s in jobs[96].steps] == ["batch", "0"]


# ---------------------------------------------------------------------------------------------
# each version's JSON, as that version printed it (22.05.8: the native cluster; 24.11.5: the
# Debian 13 container cluster, tests/data/slurm/capture.sh; README.md there says how)

VERSIONS = ("22.05", "24.11")
FORMATS = {"22.05": ("openapi/dbv0.0.38", "openapi/v0.0.38"),
           "24.11": ("data_parser/v0.0.42", "data_parser/v0.0.42")}


@pytest.mark.parametrize("version", VERSIONS)
def test_each_versions_json_is_recognised(version: str) -> None:
    assert (json_format((DATA / f"sacct-{version}.json").read_text()),
            json_format((DATA / f"squeue-{version}.json").read_text())) == FORMATS[version]


@pytest.mark.parametrize("version", VERSIONS)
def test_sacct_json_agrees_with_sacct_table_of_the_same_jobs(version: str) -> None:
    """The same finished jobs through both of sacct's outputs: the JSON (whose shape changed
    between versions) must say what the delimited table says (which did not)."""
    from_json = {j.job_id: j for j in parse_sacct_json(
        (DATA / f"sacct-{version}.json").read_text())}
    from_table = {j.job_id: j for j in slurm.parse_sacct_table(
        (DATA / f"sacct-table-{version}.txt").read_text())}
    common = sorted(set(from_json) & set(from_table))
    assert len(common) >= 2, (sorted(from_json), sorted(from_table))
    for job in common:
        j, t = from_json[job], from_table[job]
        assert (j.state, j.exit_code, j.nodes, j.alloc_nodes, j.user, j.partition) == \
            (t.state, t.exit_code, t.nodes, t.alloc_nodes, t.user, t.partition), job
        assert [(s.step, s.state, s.exit_code) for s in j.steps if s.step != "extern"] == \
            [(s.step, s.state, s.exit_code) for s in t.steps if s.step != "extern"], job


def test_sacct_json_24_11() -> None:
    jobs = {j.job_id: j for j in parse_sacct_json((DATA / "sacct-24.11.json").read_text())}
    ids = dict(line.split("=") for line in (DATA / "jobs-24.11.txt").read_text().split())
    oom, ex3, sig, multi, canc = (jobs[int(ids[k])] for k in
                                  ("oom", "exit3", "signal", "multi", "cancelled"))
    # states are lists there, numbers {"set", "number"}, step ids "<job>.batch"
    assert (oom.state, oom.exit_code) == ("OUT_OF_MEMORY", ExitCode(0, 125))
    assert (ex3.state, ex3.exit_code) == ("FAILED", ExitCode(3, 0))
    assert (sig.state, sig.exit_code) == ("FAILED", ExitCode(0, 11))
    assert sig.steps[0].state == "CANCELLED" and sig.steps[0].exit_code == ExitCode(0, 11)
    assert multi.state == "COMPLETED" and multi.nodes == ("n1", "n2", "n3")
    assert [s.step for s in multi.steps] == ["batch", "0"]
    assert multi.steps[1].nodes == ("n1", "n2", "n3") and multi.alloc_nodes == 3
    assert (canc.state, canc.name) == ("CANCELLED", "job name X=1")
    assert canc.steps[0].exit_code == ExitCode(0, 15)
    assert all(j.restarts == 0 and j.derived_exit_code == ExitCode() for j in jobs.values())


@pytest.mark.parametrize("version", VERSIONS)
def test_squeue_json_of_a_running_two_node_job(version: str) -> None:
    (st,) = slurm.parse_squeue_json((DATA / f"squeue-{version}.json").read_text())
    assert (st.state, st.name, st.user, len(st.nodes), st.alloc_nodes) == (
        "RUNNING", "two nodes", "gpatest", 2, 2)
    assert st.exit_code == ExitCode() and st.derived_exit_code == ExitCode()
    assert st.source == "squeue" and not st.final


def test_scontrol_record_of_24_11() -> None:
    rec = slurm.parse_scontrol_record((DATA / "scontrol-job-24.11.txt").read_text())
    st = slurm.job_from_scontrol(rec)
    assert (st.state, st.name, st.user, st.nodelist, st.alloc_nodes) == (
        "RUNNING", "two nodes", "gpatest", "n[2-3]", 2)
    assert rec["Comment"] == "a b=c Reason=x" and rec["Reason"] == "None"
    # 24.11 split TRES= into ReqTRES= and AllocTRES= (keys this parser had not seen)
    assert "TRES" not in rec and rec["AllocTRES"] == "cpu=2,mem=752M,node=2,billing=2"
    assert rec["StdOut"].endswith(f"/run-{st.job_id}.out")


def test_scontrol_record_of_a_lost_nodes_job_on_24_11() -> None:
    # 23.02+ print FailedNode= right after Reason=; it must not become part of the reason
    # (the job epilog maps Reason=NodeDown to NODE_FAIL).
    rec = slurm.parse_scontrol_record((DATA / "scontrol-job-nodefail-24.11.txt").read_text())
    st = slurm.job_from_scontrol(rec)
    ids = dict(line.split("=") for line in (DATA / "jobs-24.11.txt").read_text().split())
    assert st.job_id == int(ids["nodefail"])
    assert (st.state, st.reason, rec["FailedNode"]) == ("NODE_FAIL", "NodeDown", "n2")
    assert st.nodes == ("n1", "n2") and rec["Dependency"] == "(null)"
    assert st.failed_node == "n2"


def test_scontrol_record_of_a_job_requeued_for_its_lost_node_on_24_11() -> None:
    # What the job epilog reads while slurmctld requeues a --requeue job whose node died:
    # COMPLETING, Reason=None (22.05: NodeDown), FailedNode=n2 - the only sign of the node.
    rec = slurm.parse_scontrol_record((DATA / "scontrol-job-requeue-24.11.txt").read_text())
    st = slurm.job_from_scontrol(rec)
    ids = dict(line.split("=") for line in (DATA / "jobs-24.11.txt").read_text().split())
    assert st.job_id == int(ids["requeued"])
    assert (st.state, st.reason, st.failed_node, st.restarts) == ("COMPLETING", "None", "n2", 1)
    assert not st.final


def test_scontrol_record_of_22_05_has_no_failed_node() -> None:
    rec = slurm.parse_scontrol_record((DATA / "scontrol-job-22.05.txt").read_text())
    assert "FailedNode" not in rec and slurm.job_from_scontrol(rec).failed_node == ""


def test_sacct_json_nothing_found_is_empty_and_real_errors_raise() -> None:
    nothing = {"errors": [{"error_number": 9003, "error": "Nothing found with query"}],
               "jobs": []}
    assert parse_sacct_json(json.dumps(nothing)) == []
    with pytest.raises(SlurmError, match="Unable to contact"):
        parse_sacct_json(json.dumps({"errors": [{"error": "Unable to contact slurmdbd"}],
                                    "jobs": []}))
    with pytest.raises(SlurmError, match="not JSON"):
        parse_sacct_json("sacct: error: Problem talking to the database")


# ---------------------------------------------------------------------------------------------
# running commands


def test_missing_command_is_a_clear_error() -> None:
    with pytest.raises(SlurmError, match="command not found"):
        slurm.run(["scontrol-does-not-exist", "ping"])


def test_failing_command_reports_its_stderr(tmp_path: Path) -> None:
    fake = tmp_path / "scontrol"
    fake.write_text("#!/bin/sh\necho 'slurm_load_jobs error: Socket timed out' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}")
    with pytest.raises(SlurmError, match="Socket timed out"):
        slurm.run(["scontrol", "show", "job", "1"], env=env)


def test_hanging_command_times_out() -> None:
    with pytest.raises(SlurmError, match="no answer within 0.3 s"):
        slurm.run(["sleep", "5"], timeout=0.3)


@pytest.mark.parametrize("bad", ["12; rm -rf /", "", "abc", "-1"])
def test_bad_job_ids_are_refused_before_running_anything(bad: str) -> None:
    with pytest.raises(SlurmError, match="bad job id"):
        slurm.show_job(bad)


# ---------------------------------------------------------------------------------------------
# against the real cluster


@pytest.mark.cluster
def test_client_follows_a_real_job_and_acts_on_it(cluster: ClusterFacts, workdir: Path) -> None:
    job = submit("#!/bin/bash\nsleep 120\n", "-J", "client test", "--comment", "a b=c Reason=x",
                 "-o", "out-%j.txt", workdir=workdir)
    try:
        running = wait_state(job, "RUNNING", timeout=60)
        # 22.05's scontrol has no --json: its squeue's JSON stands in
        want = "squeue" if cluster.slurm_version.startswith("22.") else "scontrol"
        assert running.source == want and running.name == "client test"
        assert running.raw["Comment"] == "a b=c Reason=x" and running.user == cluster.user
        assert any(q.job_id == job for q in slurm.queue(user=cluster.user))
        slurm.update_job(job, Comment="changed by the client")
        assert slurm.show_job(job).raw["Comment"] == "changed by the client"
        slurm.cancel(job)
        st = wait_final(job, timeout=60)
        assert st.state == "CANCELLED" and st.source == "sacct"
        # (the step's own exit code, 0:15, may reach slurmdbd seconds after the job's end)
        assert [s.state for s in st.steps] == ["CANCELLED"]
    finally:
        clusterlib.cancel_quietly(job)


@pytest.mark.cluster
def test_client_errors_on_unknown_job(cluster: ClusterFacts) -> None:
    with pytest.raises(slurm.JobNotFound):
        slurm.show_job(999999999)
    with pytest.raises(slurm.JobNotFound):
        slurm.accounting(999999999)
