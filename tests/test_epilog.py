"""The node Epilog and the job epilog run as Slurm runs them (root subprocesses with Slurm's
environment) against a temporary spool that the real Prolog made; task logs written as the job's
user. Slurm itself is asked about a job id it does not know, so the facts come from the env."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_prolog import USER, hooks_log, make_env, prolog

from gpualert_slurm.core.evidence import filter_kernel_lines, parse_iso_line

REPO = Path(__file__).resolve().parent.parent
JOB = "987650001"  # no such job on the test cluster: scontrol answers "Invalid job id"


def hook(which, env, timeout=60, foreground=True):
    """Run a hook as Slurm does. The job epilog normally detaches its work from Slurm;
    foreground=True keeps it in the process, so that a test can read its results at once."""
    if foreground:
        env = dict(env, GPUALERT_HOOK_FOREGROUND="1")
    return subprocess.run([sys.executable, "-m", "gpualert_slurm", "hook", which], env=env,
                          capture_output=True, text=True, timeout=timeout)


def write_task(spool, jobid, step, rank, text, node, exit_code=0, signal=0, attempt=""):
    tasks = spool / jobid / attempt / "tasks" if attempt else spool / jobid / "tasks"
    log = tasks / f"{step}.{rank}.log"
    log.write_text(text)
    os.chown(log, USER.pw_uid, USER.pw_gid)
    rec = {"node": node, "step": step, "rank": rank, "pid": 1, "exit_code": exit_code,
           "signal": signal, "core_dumped": False, "end_time": time.time(), "status": 0}
    ex = tasks / f"{step}.{rank}.exit"
    ex.write_text(json.dumps(rec))
    os.chown(ex, USER.pw_uid, USER.pw_gid)
    return log


OOM = ("rank 1 step 10\nTraceback (most recent call last):\n  File \"train.py\", line 3\n"
       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; "
       "79.15 GiB total capacity)\n")
NCCL = ("rank 0 step 10\nRuntimeError: NCCL communicator was aborted on rank 0. "
        "Original reason for failure was: NCCL error: remote process exited or there was a "
        "network error\n")


def site_cfg(tmp_path, relay, extra="", hook_timeout_s=15):
    """A root-owned spool and a config using it, with the given SMTP relay."""
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o755)
    spool.chmod(0o755)
    cfg = tmp_path / "gpualert.yaml"
    cfg.write_text(f"spool: {spool}\nhook_timeout_s: {hook_timeout_s}\nepilog_wait_s: 3\n"
                   f"mail:\n  relay: {relay}\n  from: gpualert@localhost\n{extra}")
    return spool, cfg


@pytest.fixture
def site(tmp_path):
    # An SMTP relay nobody listens on: delivery problems must not change anything here.
    return site_cfg(tmp_path, "127.0.0.1:9", hook_timeout_s=10)


def job_with_two_ranks(site, jobid=JOB, **extra):
    spool, cfg = site
    env = make_env(cfg, jobid=jobid, SLURM_JOB_NODELIST="n[1-2]", **extra)
    assert prolog(env).returncode == 0
    assert (spool / jobid / "job.json").exists(), hooks_log(spool)
    write_task(spool, jobid, "0", 0, NCCL, "n1", exit_code=1)
    write_task(spool, jobid, "0", 1, OOM, "n2", exit_code=1)
    return spool, cfg, env


def epilogs(env, nodes=("n1", "n2")):
    for n in nodes:
        r = hook("epilog", dict(env, SLURMD_NODENAME=n, SLURM_SCRIPT_CONTEXT="epilog_slurmd",
                               SLURM_JOB_EXIT_CODE2="1:0"))
        assert r.returncode == 0
    t0 = time.monotonic()
    r = hook("epilog-slurmctld", dict(env, SLURM_SCRIPT_CONTEXT="epilog_slurmctld",
                                      SLURM_JOB_EXIT_CODE2="1:0"))
    assert r.returncode == 0
    return r, time.monotonic() - t0


def test_node_verdicts_then_job_verdict(site):
    spool, cfg, env = job_with_two_ranks(site)
    r, _ = epilogs(env)
    nodes = spool / JOB / "nodes"
    for n in ("n1", "n2"):
        rec = json.loads((nodes / f"{n}.verdict.json").read_text())
        assert rec["node"] == n and len(rec["tasks"]) == 1
        assert rec["tasks"][0]["node"] == n and rec["tasks"][0]["last_output"] > 0
        assert "absent" in rec["kernel"] and "absent" in rec["nvml"]
        assert (nodes / f"{n}.verdict.json").stat().st_uid == 0
    v = json.loads((spool / JOB / "verdict.json").read_text())
    assert v["verdict"]["class"] == "cuda_oom", v["verdict"]
    assert v["verdict"]["root_rank"] == 1 and v["verdict"]["root_node"] == "n2"
    assert v["failed"] and v["job"]["exit_code"] == 1 and v["job"]["slurm_state"] == "FAILED"
    # evidence points at the spool file, never at the /proc/self/fd name the classifier read
    assert v["verdict"]["evidence"][0]["file"] == str(spool / JOB / "tasks" / "0.1.log")
    assert "OutOfMemoryError" in "\n".join(v["last_lines"]["lines"])
    assert not v["notes"], v["notes"]


def test_show_prints_the_same_report(site):
    spool, cfg, env = job_with_two_ranks(site)
    epilogs(env)
    base = {"PATH": env["PATH"], "PYTHONPATH": env["PYTHONPATH"], "GPUALERT_CONFIG": str(cfg)}
    out = subprocess.run([sys.executable, "-m", "gpualert_slurm", "show", JOB], env=base,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "CUDA out of memory" in out.stdout and "rank 1 on n2" in out.stdout
    assert f"{spool}/{JOB}/tasks/0.1.log:4" in out.stdout
    js = subprocess.run([sys.executable, "-m", "gpualert_slurm", "show", JOB, "--json"],
                        env=base, capture_output=True, text=True, timeout=30)
    assert json.loads(js.stdout)["verdict"]["class"] == "cuda_oom"
    html = subprocess.run([sys.executable, "-m", "gpualert_slurm", "show", JOB, "--html"],
                          env=base, capture_output=True, text=True, timeout=30)
    assert html.stdout.startswith("<!DOCTYPE html>") and "rank 1</b> on <b>n2" in html.stdout
    missing = subprocess.run([sys.executable, "-m", "gpualert_slurm", "show", "424242"],
                             env=base, capture_output=True, text=True, timeout=30)
    assert missing.returncode == 1 and "was not monitored" in missing.stderr


def test_missing_node_verdict_is_waited_for_within_bound_and_noted(site):
    spool, cfg, env = job_with_two_ranks(site)
    r = hook("epilog", dict(env, SLURMD_NODENAME="n1", SLURM_JOB_EXIT_CODE2="1:0"))
    assert r.returncode == 0
    t0 = time.monotonic()
    r = hook("epilog-slurmctld", dict(env, SLURM_JOB_EXIT_CODE2="1:0"))
    took = time.monotonic() - t0
    assert r.returncode == 0 and 3 <= took < 3 + 10
    v = json.loads((spool / JOB / "verdict.json").read_text())
    assert any("node n2: no node verdict" in n for n in v["notes"])
    assert v["verdict"]["class"] == "cuda_oom"  # the logs are on shared storage all the same


def test_attempt_dirs_are_judged_separately(site):
    spool, cfg, env = job_with_two_ranks(site)
    epilogs(env)
    env1 = dict(env, SLURM_JOB_RESTART_COUNT="1")
    assert prolog(env1).returncode == 0
    a1 = spool / JOB / "attempt-1"
    assert a1.is_dir(), hooks_log(spool)
    write_task(spool, JOB, "0", 0, "all good\n", "n1", attempt="attempt-1")
    write_task(spool, JOB, "0", 1, "all good\n", "n2", attempt="attempt-1")
    for n in ("n1", "n2"):
        hook("epilog", dict(env1, SLURMD_NODENAME=n, SLURM_JOB_EXIT_CODE2="0:0"))
    hook("epilog-slurmctld", dict(env1, SLURM_JOB_EXIT_CODE2="0:0"))
    v1 = json.loads((a1 / "verdict.json").read_text())
    assert v1["attempt"] == 1 and v1["verdict"]["class"] == "success" and not v1["failed"]
    assert (a1 / "nodes" / "n1.verdict.json").exists()
    v0 = json.loads((spool / JOB / "verdict.json").read_text())
    assert v0["verdict"]["class"] == "cuda_oom"


def test_symlinked_task_log_is_not_read(site, tmp_path):
    spool, cfg, env = job_with_two_ranks(site)
    secret = tmp_path / "root-only.txt"
    secret.write_text("CUDA out of memory SECRET-ROOT-LINE\n")
    secret.chmod(0o600)
    link = spool / JOB / "tasks" / "0.2.log"
    link.symlink_to(secret)
    os.lchown(link, USER.pw_uid, USER.pw_gid)
    epilogs(env)
    text = (spool / JOB / "verdict.json").read_text()
    assert "SECRET-ROOT-LINE" not in text and "0.2.log" not in text


def test_opted_out_job_leaves_nothing(site):
    spool, cfg, env = job_with_two_ranks(site)
    off = dict(env, SPANK_GPUALERT="off")
    epilogs(off)
    assert not (spool / JOB / "verdict.json").exists()
    assert not (spool / JOB / "nodes" / "n1.verdict.json").exists()


def test_kernel_lines_in_the_job_window():
    lines = [
        "2026-11-30T06:00:00,000000+00:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has "
        "fallen off the bus.",
        "2026-11-30T06:10:00,000000+00:00 NVRM: Xid (PCI:0000:3b:00): 48, pid=2, DBE (double "
        "bit error) ECC",
        "2026-11-30T06:10:01,000000+00:00 eth0: link up",
        "2026-11-30T06:10:02,500000+00:00 python invoked oom-killer: gfp_mask=0x0",
        "2026-11-30T07:00:00,000000+00:00 Memory cgroup out of memory: Killed process 7",
    ]
    t, text = parse_iso_line(lines[3])
    assert text.startswith("python invoked") and abs(t % 60 - 2.5) < 1e-6
    start = parse_iso_line(lines[1])[0] - 60
    got = filter_kernel_lines(lines, start, start + 120)
    assert got == [lines[1], lines[3]]


def test_node_record_at_its_evidence_stage_is_enough(site):
    # The node Epilog writes its evidence before its own classification: the job epilog may
    # read that first record, without a node verdict in it.
    spool, cfg, env = job_with_two_ranks(site)
    for n in ("n1", "n2"):
        rec = {"version": 1, "node": n, "stage": "evidence", "verdict": None, "tasks": [],
               "kernel": {"source": None, "lines": [], "absent": "test"},
               "nvml": {"absent": "test", "changed": []}}
        p = spool / JOB / "nodes" / f"{n}.verdict.json"
        p.write_text(json.dumps(rec))
    r = hook("epilog-slurmctld", dict(env, SLURM_JOB_EXIT_CODE2="1:0"))
    assert r.returncode == 0 and "unexpected error" not in r.stderr, r.stderr
    v = json.loads((spool / JOB / "verdict.json").read_text())
    assert v["verdict"]["class"] == "cuda_oom" and v["nodes"]["n1"]["stage"] == "evidence"


def test_job_epilog_returns_to_slurm_before_its_work_is_done(site):
    # Slurm holds a job COMPLETING while EpilogSlurmctld runs: the work goes to a worker.
    spool, cfg, env = job_with_two_ranks(site)
    for n in ("n1", "n2"):
        hook("epilog", dict(env, SLURMD_NODENAME=n, SLURM_JOB_EXIT_CODE2="1:0"))
    r = hook("epilog-slurmctld", dict(env, SLURM_JOB_EXIT_CODE2="1:0"), foreground=False)
    returned = time.time()
    assert r.returncode == 0
    path = spool / JOB / "verdict.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (path.exists() and "report" in path.read_text()):
        time.sleep(0.2)
    v = json.loads(path.read_text())
    assert v["verdict"]["class"] == "cuda_oom" and v["report"]["status"] == "queued"
    assert path.stat().st_mtime > returned  # written after Slurm had its answer
    assert not (spool / ".gpualert" / "pending" / f"{JOB}.json").exists()
