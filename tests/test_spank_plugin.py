"""The SPANK plugin on the real cluster: the option at submit time, opting out, exit records,
Slurm's verdicts unchanged by the tap, and a tap that cannot work leaving the job alone."""

from __future__ import annotations

import json
import os
import pwd
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from clusterlib import (
    ClusterFacts,
    diagnostics,
    make_workdir,
    run_as_user,
    wait_final,
    write_user_file,
)
from spank_jobs import job_dir, require_plugin, steps, submit_held, task_files

pytestmark = pytest.mark.cluster

ACCEPTED = "(accepted: mail, notify, artifacts, hang, budget, checkpoint, recover, off)"


@pytest.fixture(scope="module")
def c(cluster: ClusterFacts) -> ClusterFacts:
    return require_plugin(cluster)


def test_plugin_option_listed_by_sbatch_and_srun(c: ClusterFacts) -> None:
    for cmd in ("sbatch", "srun"):
        assert "--gpualert" in run_as_user([cmd, "--help"], user=c.user, check=True).stdout, cmd


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        ("colour=red", f"gpualert: unknown option colour {ACCEPTED}"),
        ("notify=sometimes", "gpualert: bad option notify=sometimes: fail, always or never"),
        ("notify=", "gpualert: bad option notify=: fail, always or never"),
        ("mail=bob", "gpualert: bad option mail=bob: one or more addresses local@domain"),
        ("mail=a@b.org:", "gpualert: bad option mail=a@b.org:: one or more addresses"),
        ("hang=0s", "gpualert: bad option hang=0s: a duration like 90s, 30m, 2h or 1d"),
        ("hang=10", "gpualert: bad option hang=10: a duration like"),
        ("budget=5X", "gpualert: bad option budget=5X: a size like 500K, 20M or 1G"),
        ("recover=maybe", "gpualert: bad option recover=maybe: on or off"),
        ("notify=fail,notify=never", "gpualert: bad option notify=never: notify given twice"),
        ("off,mail=a@b.org", "gpualert: bad option off: 'off' cannot be combined"),
        ("", "gpualert: empty option list"),
    ],
)
def test_bad_options_refused_at_sbatch(c: ClusterFacts, opts: str, message: str) -> None:
    d = make_workdir(c, "badopt")
    script = write_user_file(d / "job.sh", "#!/bin/bash\ntrue\n")
    p = run_as_user(["sbatch", f"--gpualert={opts}", str(script)], cwd=d, user=c.user)
    assert p.returncode != 0, p.stdout
    assert "Submitted batch job" not in p.stdout
    assert f"sbatch: error: {message}" in p.stderr, p.stderr
    assert f"Invalid --gpualert argument: {opts}" in p.stderr, p.stderr


def test_bad_option_in_sbatch_line_refused(c: ClusterFacts) -> None:
    d = make_workdir(c, "badline")
    script = write_user_file(d / "job.sh", "#!/bin/bash\n#SBATCH --gpualert=hang=5y\ntrue\n")
    p = run_as_user(["sbatch", str(script)], cwd=d, user=c.user)
    assert p.returncode != 0
    assert "gpualert: bad option hang=5y: a duration like" in p.stderr, p.stderr


def test_good_options_accepted_and_monitored(c: ClusterFacts) -> None:
    d = make_workdir(c, "goodopt")
    opts = ("mail=a.b@lab.example.org:c@d.io,notify=always,artifacts=ckpt/*.pt:logs/*,"
            "hang=30m,budget=20M,checkpoint=ckpt/*.pt,recover=off")
    script = write_user_file(d / "job.sh", f"#!/bin/bash\n#SBATCH --gpualert={opts}\n"
                             "echo hello\n")
    jobid = submit_held(c, script)
    wait_final(jobid, 300, c.root)
    assert task_files(c, jobid)["batch.0.log"] == b"hello\n"


def test_off_and_unmonitored_jobs_leave_no_task_logs(c: ClusterFacts) -> None:
    """--gpualert=off (and no option, with default=off) taps nothing; --gpualert does."""
    d = make_workdir(c, "off")
    script = write_user_file(d / "job.sh", "#!/bin/bash\n#SBATCH -N2 -n2\n"
                             "echo batch; srun echo step\n")
    with ThreadPoolExecutor(3) as ex:
        off, plain, on = ex.map(lambda a: submit_held(c, script, a),
                                [["--gpualert=off"], [], ["--gpualert"]])
    for j in (off, plain, on):
        wait_final(j, 300, c.root)
    for j in (off, plain):
        assert task_files(c, j) == {}
        assert not (job_dir(c, j) / "tap.log").exists()
        assert (d / f"slurm-{j}.out").read_bytes() == b"batch\nstep\nstep\n"
    files = task_files(c, on)
    assert sorted(files) == [
        "0.0.exit", "0.0.log", "0.0.start", "0.1.exit", "0.1.log", "0.1.start",
        "batch.0.exit", "batch.0.log", "batch.0.start",
    ]
    # The start record ties each rank to its node (a lost node leaves no exit record).
    starts = {n: json.loads(files[n]) for n in files if n.endswith(".start")}
    for name, rec in starts.items():
        exit_rec = json.loads(files[name.replace(".start", ".exit")])
        assert (rec["node"], rec["step"], rec["rank"], rec["pid"], rec["attempt"]) == (
            exit_rec["node"], exit_rec["step"], exit_rec["rank"], exit_rec["pid"], 0), name


def exit_record(c: ClusterFacts, jobid: int, name: str) -> dict:
    raw = task_files(c, jobid)[name]
    rec = json.loads(raw)
    assert set(rec) == {"node", "step", "rank", "pid", "exit_code", "signal", "core_dumped",
                        "end_time", "status", "attempt", "log_flushed", "log_bytes", "log_gaps",
                        "log_gap_bytes", "log_first_gap"}
    return rec


def test_exit_records(c: ClusterFacts) -> None:
    """One record per task with its node, code or signal, owned by the user, mode 0600."""
    d = make_workdir(c, "exitrec")
    script = write_user_file(d / "job.sh", """#!/bin/bash
#SBATCH -N3 -n3 --gpualert
srun bash -c 'exit $((SLURM_PROCID + 3))'
srun -N1 -n1 bash -c 'kill -SEGV $$'
exit 0
""")
    t0 = time.time()
    jobid = submit_held(c, script, spool_dir="none")  # the real Prolog makes the job dir here
    wait_final(jobid, 300, c.root)
    for rank in range(3):
        rec = exit_record(c, jobid, f"0.{rank}.exit")
        assert (rec["step"], rec["rank"], rec["exit_code"], rec["signal"]) == (
            "0", rank, rank + 3, None)
        assert rec["node"] == f"n{rank + 1}"
        assert rec["status"] == (rank + 3) << 8
        assert t0 < rec["end_time"] < time.time() + 1 and rec["pid"] > 1
    seg = exit_record(c, jobid, "1.0.exit")
    assert (seg["exit_code"], seg["signal"], seg["status"] & 0x7F) == (None, signal.SIGSEGV, 11)
    batch = exit_record(c, jobid, "batch.0.exit")
    assert (batch["step"], batch["exit_code"], batch["signal"]) == ("batch", 0, None)
    st = (job_dir(c, jobid) / "tasks" / "batch.0.exit").stat()
    assert (st.st_uid, st.st_mode & 0o777) == (pwd.getpwnam(c.user).pw_uid, 0o600)


# (name, sbatch args, script body); each runs with and without the tap at the same time.
SCENARIOS = {
    "exit3": ([], "srun -n1 bash -c 'exit 3'\nexit 3\n"),
    "segv": ([], "srun -n1 bash -c 'kill -SEGV $$'\nkill -SEGV $$\n"),
    "killed": ([], "srun -n1 bash -c 'echo $$ > pid.$SLURM_JOB_ID; exec sleep 300'\n"),
    # Batch step only: with an srun step, whether srun or bash sees the signal first decides
    # the batch step's state (FAILED 15:0 or CANCELLED 0:15), a race in Slurm itself.
    "timeout": (["--time=1"], "sleep 300\n"),
    "scancel": ([], "touch started.$SLURM_JOB_ID; sleep 300\n"),
}


def test_sacct_states_identical_with_and_without_tap(c: ClusterFacts) -> None:
    d = make_workdir(c, "states")
    jobs: dict[tuple[str, bool], int] = {}
    for name, (args, body) in SCENARIOS.items():
        script = write_user_file(d / f"{name}.sh", f"#!/bin/bash\necho {name}\n{body}")
        for tap in (True, False):
            # --no-requeue: a node lost meanwhile shows as NODE_FAIL, not as a slow re-run.
            jobs[name, tap] = submit_held(c, script, [*args, "--no-requeue",
                                                 "--gpualert" if tap else "--gpualert=off"])
    # Outside interference once the steps run: SIGKILL the task, scancel the job.
    deadline = time.monotonic() + 60
    pending = {k: j for k, j in jobs.items() if k[0] in ("killed", "scancel")}
    while pending and time.monotonic() < deadline:
        for (name, tap), j in list(pending.items()):
            if name == "killed":
                pidfile = d / f"pid.{j}"
                if pidfile.exists() and pidfile.read_text().strip():
                    time.sleep(1)
                    os.kill(int(pidfile.read_text()), signal.SIGKILL)
                    del pending[name, tap]
            elif (d / f"started.{j}").exists():
                time.sleep(1)
                run_as_user(["scancel", str(j)], user=c.user, check=True)
                del pending[name, tap]
        time.sleep(0.5)
    assert not pending, f"jobs never reached their step: {pending}\n{diagnostics(None, c.root)}"
    for j in jobs.values():
        wait_final(j, 360, c.root)
    expect = {"exit3": ("FAILED", "3:0"), "segv": ("FAILED", "0:11"),
              "killed": ("FAILED", "9:0"), "timeout": ("TIMEOUT", "0:0"),
              "scancel": ("CANCELLED", "0:0")}
    for name in SCENARIOS:
        with_tap, without = steps(jobs[name, True]), steps(jobs[name, False])
        assert with_tap == without, name
        assert with_tap[0][1:] == expect[name], (name, with_tap)
        # The monitored job's tasks all have a record, also when killed.
        assert "batch.0.exit" in task_files(c, jobs[name, True]), name


def test_unwritable_spool_dir_job_runs_untouched(c: ClusterFacts) -> None:
    """A job dir the user cannot write (root's, 0755): the tap steps aside, output intact."""
    d = make_workdir(c, "rospool")
    script = write_user_file(d / "job.sh", "#!/bin/bash\n#SBATCH -N2 -n2 --gpualert\n"
                             "printf 'batch\\0'; srun printf 'step\\n'; exit 0\n")
    jobid = submit_held(c, script, spool_dir="root-ro")
    wait_final(jobid, 300, c.root)
    assert steps(jobid)[0][1:] == ("COMPLETED", "0:0")
    assert (d / f"slurm-{jobid}.out").read_bytes() == b"batch\0step\nstep\n"
    assert list(job_dir(c, jobid).iterdir()) == []
    # The fault is not silent: the task says so in slurmd's log (info level).
    logs = "".join(p.read_text(errors="replace") for p in c.logs.glob("slurmd-*.log"))
    assert f"gpualert: job {jobid} " in logs and "forwarded but not logged" in logs


def test_exec_failure_still_logged_and_recorded(c: ClusterFacts) -> None:
    d = make_workdir(c, "execfail")
    script = write_user_file(d / "job.sh", "#!/bin/bash\n#SBATCH --gpualert\n"
                             "srun -n1 /nonexistent/prog; echo srun=$?\n")
    jobid = submit_held(c, script)
    wait_final(jobid, 300, c.root)
    files = task_files(c, jobid)
    log = files["0.0.log"].decode(errors="replace")
    assert "/nonexistent/prog" in log and "No such file or directory" in log, log
    rec = exit_record(c, jobid, "0.0.exit")
    assert rec["exit_code"] not in (0, None), rec
    assert "srun=" in (d / f"slurm-{jobid}.out").read_text()
