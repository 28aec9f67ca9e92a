"""`gpualert hook prolog` run as Slurm runs it: a root subprocess with Slurm's environment,
against a temporary spool. (The real-cluster test lives with the cluster tests; it needs only
`make_env()`-like variables, which Slurm itself provides there.)"""

import json
import os
import pwd
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpualert_slurm.hooks.prolog import expand_hostlist

REPO = Path(__file__).resolve().parent.parent


def job_user():
    for name in ("gpatest", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("no gpatest or nobody user")


USER = job_user()


def nvml_library_loads() -> bool:
    """Whether NVIDIA's driver library is on this machine (independent of our code)."""
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        return True
    except OSError:
        return False


def assert_nvml_as_expected(nvml) -> None:
    """A GPU snapshot where the driver is, the reason where it is not: never the other one."""
    if nvml_library_loads():
        assert isinstance(nvml, dict) and nvml["devices"], nvml
    else:
        assert isinstance(nvml, str) and nvml.startswith(
            "unavailable: NVMLError_LibraryNotFound"), nvml


@pytest.fixture
def site(tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o755)
    spool.chmod(0o755)
    cfg = tmp_path / "gpualert.yaml"
    cfg.write_text(f"spool: {spool}\ndefault_monitoring: false\nhook_timeout_s: 10\n")
    return spool, cfg


def make_env(cfg, jobid="101", node="n1", **extra):
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(REPO),
        "GPUALERT_CONFIG": str(cfg),
        "SLURM_JOB_ID": jobid,
        "SLURM_JOB_USER": USER.pw_name,
        "SLURM_JOB_UID": str(USER.pw_uid),
        "SLURM_JOB_GID": str(USER.pw_gid),
        "SLURM_JOB_NODELIST": "n[1-3]",
        "SLURMD_NODENAME": node,
        "SLURM_JOB_PARTITION": "debug",
        "SLURM_JOB_WORK_DIR": "/home/someone/work",
        "SLURM_SCRIPT_CONTEXT": "prolog_slurmd",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "SPANK_GPUALERT": "mail=me@lab.org,hang=30m",
    }
    env.update({k: v for k, v in extra.items() if v is not None})
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
    return env


def prolog(env, timeout=30):
    return subprocess.run([sys.executable, "-m", "gpualert_slurm", "hook", "prolog"], env=env,
                          capture_output=True, text=True, timeout=timeout)


def hooks_log(spool):
    p = spool / "gpualert-hooks.log"
    return p.read_text() if p.exists() else ""


def test_creates_the_job_dir_owned_by_the_user(site):
    spool, cfg = site
    r = prolog(make_env(cfg))
    assert r.returncode == 0
    d = spool / "101"
    st = d.lstat()
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == USER.pw_uid and st.st_gid == USER.pw_gid
    assert stat.S_IMODE(st.st_mode) == 0o700
    for sub in ("tasks", "nodes"):
        sst = (d / sub).lstat()
        assert sst.st_uid == USER.pw_uid and stat.S_IMODE(sst.st_mode) == 0o700
    job = json.loads((d / "job.json").read_text())
    assert job["job_id"] == "101" and job["user"] == USER.pw_name
    assert job["uid"] == USER.pw_uid and job["nodes"] == ["n1", "n2", "n3"]
    assert job["options"]["mail"] == ["me@lab.org"] and job["options"]["hang_s"] == 1800
    assert job["gpus"] == {"n1": "0,1"} and job["restart_count"] == 0
    assert abs(job["start_time"] - time.time()) < 60
    node = json.loads((d / "nodes" / "n1.prolog.json").read_text())
    assert node["node"] == "n1" and node["cuda_visible_devices"] == "0,1"
    assert_nvml_as_expected(node["nvml"])
    assert "prolog: job 101: created" in hooks_log(spool)
    lst = (spool / "gpualert-hooks.log").stat()
    assert lst.st_uid == 0 and stat.S_IMODE(lst.st_mode) == 0o600
    assert not [p for p in spool.iterdir() if p.name.startswith(".tmp")]


def test_opted_out_and_default_off_make_nothing(site):
    spool, cfg = site
    assert prolog(make_env(cfg, SPANK_GPUALERT="off")).returncode == 0
    assert prolog(make_env(cfg, jobid="102", SPANK_GPUALERT=None)).returncode == 0
    assert not (spool / "101").exists() and not (spool / "102").exists()


def test_site_default_on_monitors_jobs_without_the_option(site, tmp_path):
    spool, cfg = site
    cfg.write_text(f"spool: {spool}\ndefault_monitoring: true\n")
    assert prolog(make_env(cfg, SPANK_GPUALERT=None)).returncode == 0
    assert json.loads((spool / "101" / "job.json").read_text())["options"]["monitored"]


def test_other_nodes_join_and_leave_job_json_alone(site):
    spool, cfg = site
    assert prolog(make_env(cfg, node="n1")).returncode == 0
    before = (spool / "101" / "job.json").read_bytes()
    assert prolog(make_env(cfg, node="n2")).returncode == 0
    assert (spool / "101" / "job.json").read_bytes() == before
    assert (spool / "101" / "nodes" / "n2.prolog.json").exists()
    assert "prolog: job 101: joined" in hooks_log(spool)


def test_concurrent_prologs_on_many_nodes(site):
    spool, cfg = site
    nodes = [f"n{i}" for i in range(1, 9)]
    procs = [subprocess.Popen([sys.executable, "-m", "gpualert_slurm", "hook", "prolog"],
                              env=make_env(cfg, jobid="300", node=n,
                                           SLURM_JOB_NODELIST="n[1-8]"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for n in nodes]
    assert [p.wait(timeout=60) for p in procs] == [0] * len(nodes)
    d = spool / "300"
    assert sorted(p.name for p in (d / "nodes").iterdir()) == sorted(
        f"{n}.prolog.json" for n in nodes)
    assert json.loads((d / "job.json").read_text())["created_by_node"] in nodes
    log = hooks_log(spool)
    assert log.count("job 300: created") == 1 and log.count("job 300: joined") == len(nodes) - 1
    assert not [p for p in spool.iterdir() if p.name.startswith(".tmp")]


def test_requeued_job_gets_a_fresh_job_json(site):
    spool, cfg = site
    assert prolog(make_env(cfg)).returncode == 0
    first = json.loads((spool / "101" / "job.json").read_text())
    assert prolog(make_env(cfg, SLURM_JOB_RESTART_COUNT="1")).returncode == 0
    job = json.loads((spool / "101" / "job.json").read_text())
    assert job["restart_count"] == 1
    assert [a["attempt"] for a in job["attempts"]] == [0, 1]
    assert job["attempts"][0]["start_time"] == first["start_time"]


def test_requeued_job_gets_its_own_attempt_dir(site):
    spool, cfg = site
    assert prolog(make_env(cfg, node="n1")).returncode == 0
    for node in ("n2", "n3"):  # attempt 1 runs on other nodes
        assert prolog(make_env(cfg, node=node, SLURM_JOB_RESTART_COUNT="1")).returncode == 0
    d = spool / "101"
    att = d / "attempt-1"
    for sub in (att, att / "nodes", att / "tasks"):
        st = sub.lstat()
        assert stat.S_ISDIR(st.st_mode) and st.st_uid == USER.pw_uid
        assert stat.S_IMODE(st.st_mode) == 0o700
    # Each attempt's node records in its own nodes/; attempt 0's are left as they were.
    assert sorted(p.name for p in (d / "nodes").iterdir()) == ["n1.prolog.json"]
    assert sorted(p.name for p in (att / "nodes").iterdir()) == ["n2.prolog.json",
                                                                 "n3.prolog.json"]
    rec = json.loads((att / "nodes" / "n2.prolog.json").read_text())
    assert rec["restart_count"] == 1
    assert rec["slurm_env"]["SLURM_JOB_RESTART_COUNT"] == "1"
    assert (d / "job.json").stat().st_uid == 0 and not (att / "job.json").exists()
    log = hooks_log(spool)
    assert f"job 101: created {att} " in log and f"job 101: joined {att} " in log
    # A third attempt: attempt-1 is untouched.
    assert prolog(make_env(cfg, node="n1", SLURM_JOB_RESTART_COUNT="2")).returncode == 0
    assert sorted(p.name for p in (d / "attempt-2" / "nodes").iterdir()) == ["n1.prolog.json"]
    assert len(list((att / "nodes").iterdir())) == 2
    job = json.loads((d / "job.json").read_text())
    assert [a["attempt"] for a in job["attempts"]] == [0, 1, 2]


def test_planted_attempt_symlink_is_refused(site, tmp_path):
    spool, cfg = site
    assert prolog(make_env(cfg)).returncode == 0
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o755)
    (spool / "101" / "attempt-1").symlink_to(victim)
    assert prolog(make_env(cfg, SLURM_JOB_RESTART_COUNT="1")).returncode == 0
    assert list(victim.iterdir()) == [] and victim.lstat().st_uid == 0
    assert "attempt-1: not a directory (a symlink or a file): refused" in hooks_log(spool)


def test_symlink_attack_is_refused(site, tmp_path):
    spool, cfg = site
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o755)
    (spool / "101").symlink_to(victim)
    r = prolog(make_env(cfg))
    assert r.returncode == 0
    assert list(victim.iterdir()) == []
    assert victim.lstat().st_uid == 0 and stat.S_IMODE(victim.lstat().st_mode) == 0o755
    assert (spool / "101").is_symlink()
    assert "refused" in hooks_log(spool) and "job 101" in hooks_log(spool)


def test_foreign_preexisting_dir_is_refused(site):
    spool, cfg = site
    d = spool / "101"
    d.mkdir(mode=0o755)
    os.chown(d, 4242, 4242)
    r = prolog(make_env(cfg))
    assert r.returncode == 0
    assert list(d.iterdir()) == [] and d.stat().st_uid == 4242
    assert "owned by uid 4242" in hooks_log(spool) and "refused" in hooks_log(spool)


def test_world_writable_spool_is_refused(site):
    spool, cfg = site
    spool.chmod(0o777)
    assert prolog(make_env(cfg)).returncode == 0
    assert not (spool / "101").exists()
    assert "writable by group or others" in hooks_log(spool)


def test_broken_config_still_exits_0_with_a_log_line(site):
    spool, cfg = site
    cfg.write_text("recovery: {mode: yolo}\n")
    r = prolog(make_env(cfg))
    assert r.returncode == 0
    assert "recovery.mode: expected monitor or action" in r.stderr
    assert "Traceback" not in r.stderr


def test_missing_spool_exits_0_with_a_log_line(site, tmp_path):
    _, cfg = site
    cfg.write_text(f"spool: {tmp_path / 'nope'}\n")
    r = prolog(make_env(cfg))
    assert r.returncode == 0
    assert f"spool {tmp_path / 'nope'} does not exist" in r.stderr
    assert not (tmp_path / "nope").exists()


def test_not_run_by_slurm(site):
    _, cfg = site
    r = prolog(make_env(cfg, SLURM_JOB_ID=None))
    assert r.returncode == 0 and "not run by Slurm" in r.stderr


def test_watchdog_bounds_a_stuck_hook(site, tmp_path):
    # Reading the config from a FIFO nobody writes blocks forever: the watchdog must end it.
    fifo = tmp_path / "stuck.yaml"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    r = prolog(make_env(fifo, GPUALERT_HOOK_TIMEOUT="4"), timeout=30)
    assert r.returncode == 0
    assert time.monotonic() - t0 < 10
    assert "gave up after 1 s" in r.stderr


@pytest.mark.parametrize("text,nodes", [
    ("n1", ["n1"]),
    ("n[1-3]", ["n1", "n2", "n3"]),
    ("gpu[08-10,12],login", ["gpu08", "gpu09", "gpu10", "gpu12", "login"]),
    ("a[1-2]-ib,b3", ["a1-ib", "a2-ib", "b3"]),
])
def test_expand_hostlist(text, nodes):
    assert expand_hostlist(text) == nodes


def test_gpu_snapshot_shape():
    from gpualert_slurm.core.gpu import gpu_snapshot

    snap = gpu_snapshot()
    assert_nvml_as_expected(snap)
    if isinstance(snap, dict):
        assert all("uuid" in d for d in snap["devices"])


@pytest.mark.gpu
def test_gpu_snapshot_on_a_gpu_node():
    from gpualert_slurm.core.gpu import gpu_snapshot

    snap = gpu_snapshot()
    if isinstance(snap, str):
        pytest.skip(f"no usable GPU here: {snap}")
    dev = snap["devices"][0]
    assert dev["uuid"].startswith("GPU-") and dev["memory_total"] > 0
    assert isinstance(dev["temperature_c"], int)


def test_hook_usage_errors():
    r = subprocess.run([sys.executable, "-m", "gpualert_slurm", "hook", "prologue"],
                       env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                       text=True)
    assert r.returncode == 2 and "expected one of prolog, epilog, epilog-slurmctld" in r.stderr


def test_job_json_replaced_by_the_user_is_restored(site):
    spool, cfg = site
    assert prolog(make_env(cfg, node="n1")).returncode == 0
    j = spool / "101" / "job.json"
    j.unlink()
    j.write_text(json.dumps({"restart_count": 0, "job_id": "999"}))
    os.chown(j, USER.pw_uid, USER.pw_gid)
    assert prolog(make_env(cfg, node="n2")).returncode == 0
    assert j.stat().st_uid == 0
    assert json.loads(j.read_text())["job_id"] == "101"
