"""The epilogs on the real cluster: Slurm runs the node Epilog and EpilogSlurmctld after real
failing jobs, and the report reaches the cluster's SMTP sink (or its outbox). Isolation cases
swap the cluster's gpualert.yaml (or plugstack.conf) for a few seconds under the cluster lock
and always restore it: in every case sacct's state and exit code are what the job made them,
no node is drained, and the epilog ends within its bound."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from pathlib import Path

import clusterlib as cl
import pytest

from gpualert_slurm.core.slurm_records import FINAL_STATES

pytestmark = pytest.mark.cluster

RANKS = """cat > rank.py <<'PY'
import ctypes, os, sys, time
r, fail, kind = int(os.environ['SLURM_PROCID']), int(sys.argv[1]), sys.argv[2]
print(f"rank {r} on {os.environ['SLURMD_NODENAME']}: starting", flush=True)
if r == fail:
    time.sleep(0.5)
    if kind == 'oom':
        print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB '
              '(GPU 0; 79.15 GiB total capacity)', file=sys.stderr, flush=True)
        sys.exit(1)
    if kind == 'segv':
        ctypes.string_at(0)
    if kind == 'exc':
        raise ValueError(f'shard {r} has 0 samples')
time.sleep(4)
print('RuntimeError: NCCL error: remote process exited or there was a network error',
      file=sys.stderr, flush=True)
sys.exit(1)
PY
"""
BOUND_S = 55  # the job epilog shim's timeout (epilog.d/gpualert-epilog-slurmctld)


def failing_job(fail_rank: int, kind: str, opts: str = "mail=gpatest@localhost") -> str:
    head = "#!/bin/bash\n" + (f"#SBATCH --gpualert={opts}\n" if opts is not None else "")
    return head + RANKS + f"srun -N3 -n3 python3 rank.py {fail_rank} {kind}\n"


def mails_for(maildir: Path, job: int) -> list[Path]:
    pat = re.compile(rb"^X-Gpualert-Job: " + str(job).encode() + rb"\r?$", re.M)
    return [p for p in cl.mail_files(maildir) if pat.search(p.read_bytes())]


def verdict(cluster: cl.ClusterFacts, job: int, timeout: float = 90,
            want_report: bool = True) -> dict:
    path = cluster.spool / str(job) / "verdict.json"

    def ready():
        if not path.exists():
            return None
        v = json.loads(path.read_text())
        return v if (not want_report or "report" in v) else None

    return cl.wait_until(ready, timeout, f"{path} (with its report)",
                         diagnose=lambda: hooks_lines(cluster, job))


def hooks_lines(cluster: cl.ClusterFacts, job: int) -> str:
    log = cluster.spool / "gpualert-hooks.log"
    if not log.exists():
        return "(no hooks log)"
    return "".join(ln for ln in log.read_text(errors="replace").splitlines(True)
                   if f"job {job}:" in ln)


def epilog_seconds(cluster: cl.ClusterFacts, job: int) -> float:
    """The job epilog's own account of its duration (the 'report ... in X s' line)."""
    m = re.findall(rf"epilog-slurmctld: job {job}: report .* in ([0-9.]+) s", hooks_lines(
        cluster, job))
    assert m, hooks_lines(cluster, job)
    return float(m[-1])


def assert_untouched(st, nodes=("n1", "n2", "n3"), state="FAILED", code=1) -> None:
    assert st.state == state and st.exit_code.code == code, st
    for n in nodes:
        assert "drain" not in cl.node_state(n), (n, cl.node_state(n))


@contextlib.contextmanager
def swapped(path: Path, text: str, cluster: cl.ClusterFacts):
    """Replace a shared cluster file for the duration, under the cluster lock; restore it."""
    with cl.cluster_lock(cluster):
        old = path.read_text()
        try:
            path.write_text(text)
            yield
        finally:
            path.write_text(old)


def config_with(cluster: cl.ClusterFacts, replace: dict[str, str]) -> str:
    text = cluster.gpualert_config.read_text()
    for old, new in replace.items():
        assert old in text, (old, text)
        text = text.replace(old, new)
    return text


# ---- reports ---------------------------------------------------------------------------------

def test_failing_multinode_jobs_get_one_report_each(cluster, workdir):
    cases = {("oom", 1): "cuda_oom", ("segv", 2): "segfault", ("exc", 0): "python_exception"}
    jobs = {}
    for (kind, rank), cls in cases.items():
        jobs[cl.submit(failing_job(rank, kind), "-N3", "-J", f"multi-{kind}", workdir=workdir,
                       name=f"{kind}.sh")] = (kind, rank, cls)
    states = cl.wait_final_many(list(jobs), timeout=180, root=cluster.root)
    for st in states:
        assert_untouched(st, state=st.state, code=st.exit_code.code)
        assert st.state == "FAILED"
    for job, (kind, rank, cls) in jobs.items():
        v = verdict(cluster, job)
        assert v["verdict"]["class"] == cls, (kind, v["verdict"])
        assert v["verdict"]["root_rank"] == rank, (kind, v["verdict"])
        ran_on = {t["rank"]: t["node"] for t in v["tasks"] if t["step"] == "0"}
        assert v["verdict"]["root_node"] == ran_on[rank], (kind, v["verdict"], ran_on)
        assert v["report"]["status"] == "sent", v["report"]
        # NVML is absent on this machine: recorded as such, not an error
        node_rec = json.loads((cluster.spool / str(job) / "nodes" /
                               f"{ran_on[rank]}.verdict.json").read_text())
        assert node_rec["nvml"]["absent"]
        cl.wait_until(lambda j=job: mails_for(cluster.maildir, j), 30, f"mail of {job}")
        time.sleep(1)
        assert len(mails_for(cluster.maildir, job)) == 1
        assert f"rank {rank}" in v["report"]["subject"]
        assert epilog_seconds(cluster, job) < BOUND_S


def test_show_reads_the_verdict_as_the_user(cluster, workdir):
    job = cl.submit(failing_job(1, "oom"), "-N3", "-J", "show-me", workdir=workdir)
    cl.wait_final(job, 120, cluster.root)
    verdict(cluster, job)
    r = cl.run_as_user(["/opt/gpualert/venv/bin/gpualert", "show", str(job)],
                       env={"GPUALERT_CONFIG": str(cluster.gpualert_config)})
    assert r.returncode == 0, r.stderr
    assert f"FAILED job {job} (show-me): CUDA out of memory" in r.stdout
    assert "rank 1 on" in r.stdout


# ---- isolation -------------------------------------------------------------------------------

class SilentRelay:
    """Accepts TCP connections and never says a word."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


def one_failing_job(cluster, workdir, name) -> tuple[int, object, dict]:
    job = cl.submit(failing_job(1, "oom"), "-N3", "-J", name, workdir=workdir,
                    name=f"{name}.sh")
    st = cl.wait_final(job, 120, cluster.root)
    v = verdict(cluster, job)
    return job, st, v


class RejectingRelay:
    """A real SMTP server (aiosmtpd) that refuses every message at DATA with a 554."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        class Handler:
            async def handle_DATA(self, server, session, envelope):  # noqa: ANN001
                return "554 5.6.0 message rejected by policy"

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.ctl = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self.ctl.start()

    def close(self) -> None:
        self.ctl.stop()


@pytest.mark.parametrize("relay", ["down", "silent", "rejects"])
def test_relay_trouble_leaves_the_report_in_the_outbox(cluster, workdir, relay):
    server: SilentRelay | RejectingRelay | None = None
    if relay == "down":
        addr = "127.0.0.1:9"  # discard: nothing listens there
    else:
        server = RejectingRelay() if relay == "rejects" else SilentRelay()
        addr = f"127.0.0.1:{server.port}"
    try:
        text = config_with(cluster, {f"relay: {cluster.smtp_host}:{cluster.smtp_port}":
                                     f"relay: {addr}"})
        with swapped(cluster.gpualert_config, text, cluster):
            job, st, v = one_failing_job(cluster, workdir, f"relay-{relay}")
    finally:
        if server:
            server.close()
    assert_untouched(st)
    want = {"down": "queued", "silent": "queued", "rejects": "quarantined"}[relay]
    assert v["report"]["status"] == want, v["report"]
    outbox = Path(v["report"]["outbox"])
    assert outbox.exists() and f"job {job}" in outbox.read_text(errors="replace")
    assert epilog_seconds(cluster, job) < BOUND_S
    assert v["verdict"]["class"] == "cuda_oom"
    outbox.unlink()  # not for `gpualert flush` to send to the sink later


def test_spool_missing_changes_nothing(cluster, workdir):
    text = config_with(cluster, {f"spool: {cluster.spool}": "spool: /nonexistent/gpualert"})
    with swapped(cluster.gpualert_config, text, cluster):
        job = cl.submit(failing_job(1, "oom"), "-N3", "-J", "no-spool", workdir=workdir)
        st = cl.wait_final(job, 120, cluster.root)
        time.sleep(2)
    assert_untouched(st)
    # no hook had a spool to work in: no verdict, no report (the tap may still keep logs)
    assert not (cluster.spool / str(job) / "verdict.json").exists()
    assert not mails_for(cluster.maildir, job)


def test_huge_log_bounded_epilog_and_report(cluster, workdir):
    # The job grows its own batch log to 1 GiB (sparse, so the test costs no real I/O), then
    # fails: the classifier cannot read it all in time, the report goes out all the same.
    script = ("#!/bin/bash\n#SBATCH --gpualert=mail=gpatest@localhost\n"
              "echo 'step 1 of many'\n"
              f"truncate -s 1G {cluster.spool}/$SLURM_JOB_ID/tasks/batch.0.log\n"
              "echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB'"
              " >&2\nexit 1\n")
    job = cl.submit(script, "-J", "huge-log", workdir=workdir)
    st = cl.wait_final(job, 120, cluster.root)
    assert_untouched(st)
    v = verdict(cluster, job, timeout=120)
    assert v["tasks"][0]["size"] >= 1 << 30
    assert v["report"]["status"] == "sent", v["report"]
    att = {a["name"]: a for a in v["artifacts"]["attached"]}
    assert "cut to its first and last" in att["batch.0.log.gz"]["note"]
    assert "CUDA out of memory" in v["last_lines"]["lines"][-1]
    assert epilog_seconds(cluster, job) < BOUND_S


def test_default_on_monitors_unasked_jobs_and_off_opts_out(cluster, workdir):
    plug = cluster.root / "etc" / "plugstack.conf"
    text = plug.read_text()
    assert "default=off" in text, text
    with swapped(plug, text.replace("default=off", "default=on"), cluster):
        asked_nothing = cl.submit(failing_job(1, "oom", opts=None), "-N3", "-J", "unasked",
                                  workdir=workdir, name="unasked.sh")
        opted_out = cl.submit(failing_job(1, "oom", opts="off"), "-N3", "-J", "opted-out",
                              workdir=workdir, name="off.sh")
        states = cl.wait_final_many([asked_nothing, opted_out], 120, cluster.root)
    for st in states:
        assert_untouched(st)
    v = verdict(cluster, asked_nothing)
    assert v["verdict"]["class"] == "cuda_oom" and v["options"]["monitored"]
    time.sleep(2)
    assert not (cluster.spool / str(opted_out)).exists()
    if v["report"].get("outbox"):
        with contextlib.suppress(OSError):
            Path(v["report"]["outbox"]).unlink()


# ---- job arrays ------------------------------------------------------------------------------

ARRAY = """#!/bin/bash
#SBATCH --gpualert=mail=gpatest@localhost
case $SLURM_ARRAY_TASK_ID in
  0|1) echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2; exit 1;;
  2) python3 -c 'raise ValueError("bad shard")';;
  *) sleep 2; echo ok;;
esac
"""


def array_tasks(array_id: int) -> dict[str, tuple[int, str, str]]:
    """task id -> (its own job id, state, nodes) while slurmctld remembers the array."""
    out = cl.slurm.run(["squeue", "-h", "-r", "-t", "all", "-j", str(array_id),
                        "-o", "%F|%K|%A|%T|%N"])
    rows = [ln.split("|") for ln in out.splitlines()]
    return {r[1]: (int(r[2]), r[3], r[4]) for r in rows if len(r) == 5 and r[0] == str(array_id)}


def all_ended(array_id: int) -> dict | None:
    t = array_tasks(array_id)
    return t if t and all(s in FINAL_STATES for _, s, _ in t.values()) else None


def test_array_gets_one_summary_grouped_by_class(cluster, workdir):
    arr = cl.submit(ARRAY, "--array=0-3", "-J", "arr-sum", workdir=workdir)
    tasks = cl.wait_until(lambda: all_ended(arr), 120, f"array {arr} to end")
    cl.wait_until(lambda: mails_for(cluster.maildir, arr), 60, f"the summary of array {arr}")
    time.sleep(3)  # a second summary, or per-task mails, would have arrived by now
    mails = mails_for(cluster.maildir, arr)
    assert len(mails) == 1
    text = mails[0].read_text(errors="replace")
    assert (f"Subject: [gpualert] array {arr} (arr-sum): 3 of 4 tasks FAILED: CUDA out of "
            "memory x2, Python exception x1") in text.replace("\n ", " ")
    for task, (job, state, _) in tasks.items():
        assert state == ("COMPLETED" if task == "3" else "FAILED")
        v = json.loads((cluster.spool / str(job) / "verdict.json").read_text())
        assert v["array"] == {"job_id": str(arr), "task_id": task}
        if job != arr:
            assert not mails_for(cluster.maildir, job)
        if v["failed"]:
            assert v["report"]["status"] == "in the array summary"


def test_array_cancelled_midway_still_summarised(cluster, workdir):
    script = "#!/bin/bash\n#SBATCH --gpualert=mail=gpatest@localhost\nsleep 60\n"
    arr = cl.submit(script, "--array=0-5%2", "-J", "arr-cut", workdir=workdir)
    cl.wait_until(lambda: sum(s == "RUNNING" for _, s, _ in array_tasks(arr).values()) == 2,
                  60, f"two tasks of array {arr} running")
    time.sleep(2)
    cl.run_as_user(["scancel", str(arr)], check=True)
    cl.wait_until(lambda: all_ended(arr), 60, f"array {arr} to end")
    mail = cl.wait_until(lambda: mails_for(cluster.maildir, arr), 60, f"summary of {arr}")[0]
    text = mail.read_text(errors="replace").replace("\n ", " ")
    assert f"array {arr} (arr-cut): 2 of 2 tasks FAILED: cancelled x2" in text
    assert "2 task(s) reported, 2 failed, 0 completed, 4 never ran." in text
    state = json.loads((cluster.spool / ".gpualert" / "arrays" / f"{arr}.json").read_text())
    assert state["sent"] and not any(t.get("in_flight") for t in state["tasks"].values())


def test_array_cancelled_before_any_task_ran_leaves_nothing(cluster, workdir):
    arr = cl.submit("#!/bin/bash\n#SBATCH --gpualert=mail=gpatest@localhost\necho hi\n",
                    "--array=0-5", "--hold", "-J", "arr-never", workdir=workdir)
    cl.run_as_user(["scancel", str(arr)], check=True)
    cl.wait_until(lambda: all_ended(arr), 60, f"array {arr} to end")
    time.sleep(5)
    assert not mails_for(cluster.maildir, arr)
    assert not (cluster.spool / str(arr)).exists()
    outbox = cluster.spool / ".outbox"
    assert not any(f"X-Gpualert-Job: {arr}" in p.read_text(errors="replace")
                   for p in outbox.rglob("*") if p.is_file())
    # nothing kept that anything would come back to: no state, or a finished one
    st = cluster.spool / ".gpualert" / "arrays" / f"{arr}.json"
    assert not st.exists() or not any(t.get("in_flight") for t in
                                      json.loads(st.read_text())["tasks"].values())


def test_classifier_raising_still_reports(cluster, workdir, tmp_path):
    # Broken site rules make the classifier raise; only the job epilog sees them here (its
    # hook copy exports GPUALERT_RULES_DIR for the few seconds of this test).
    rules = cluster.root / "etc" / "broken-rules.d"
    rules.mkdir(exist_ok=True)
    (rules / "bad.yaml").write_text("rules:\n  - id: broken\n    class: no_such_class\n")
    hook = cluster.root / "etc" / "hooks" / "gpualert-epilog-slurmctld"
    text = hook.read_text()
    first, rest = text.split("\n", 1)
    try:
        with swapped(hook, f"{first}\nexport GPUALERT_RULES_DIR={rules}\n{rest}", cluster):
            job, st, v = one_failing_job(cluster, workdir, "bad-rules")
    finally:
        (rules / "bad.yaml").unlink()
        rules.rmdir()
    assert_untouched(st)
    assert v["verdict"]["class"] == "cuda_oom" and "site rules ignored" in v["verdict"]["detail"]
    assert v["report"]["status"] == "sent"
    assert epilog_seconds(cluster, job) < BOUND_S


def test_symlink_attack_on_artifact_globs(cluster, workdir):
    # The job plants links to root-only files where its artifact glob looks; the report,
    # built as root, must attach none of them.
    script = ("#!/bin/bash\n#SBATCH --gpualert=mail=gpatest@localhost,artifacts=out/*\n"
              "mkdir -p out\nln -s /etc/shadow out/metrics.txt\n"
              f"ln -s {cluster.root}/etc/.dbpass out/db.txt\n"
              "echo fine > out/ok.txt\n"
              "echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2\n"
              "exit 1\n")
    job = cl.submit(script, "-J", "symlinks", workdir=workdir)
    st = cl.wait_final(job, 120, cluster.root)
    assert_untouched(st)
    v = verdict(cluster, job)
    assert [a["name"] for a in v["artifacts"]["attached"] if a["kind"] == "artifact"] == \
        ["out/ok.txt"]
    refused = {x["name"]: x["reason"] for x in v["artifacts"]["left_out"]}
    assert "refused" in refused["out/metrics.txt"] and "refused" in refused["out/db.txt"]
    from test_report import decoded

    raw = decoded(cl.wait_until(lambda: mails_for(cluster.maildir, job), 30, "the mail")[0])
    assert b"fine\n" in raw  # decoding works: the allowed file's content is found
    shadow_root = Path("/etc/shadow").read_bytes().split(b"\n", 1)[0]
    assert shadow_root not in raw
    assert (cluster.root / "etc" / ".dbpass").read_bytes().strip() not in raw
