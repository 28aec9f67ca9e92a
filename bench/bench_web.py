"""The web pages' cost (gpualert_slurm/web/): the list of N jobs and the page of a job whose log
is 1 GiB, each beside the time to read the verdict.json(s) alone, and the memory they take.

    bench_web.py [--jobs N] [--log-gib G] [--runs R]     (defaults: 1000 jobs, 1 GiB, 7 runs)

Builds a spool in /tmp (root's, as the Prolog's is) with N job dirs of the test user, each with
a verdict.json the size of a real one (8 ranks, 5 evidence lines, 30 last lines, a manifest),
and one job whose rank-0 log is G GiB of training lines. The app runs in a child that has
become the test user, as `gpualert web` and Open OnDemand run it. Targets: the list <= 0.3 s,
the job page <= 0.2 s (it never reads the log); the log viewer at the log's last page and at a
deep evidence line shows that memory stays bounded (ru_maxrss). Medians of R runs, each page
timed in turn with its verdict.json reads, after one warm-up. Prints figures; exits non-zero
only when something fails.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gpualert_slurm.core.config import Config  # noqa: E402
from gpualert_slurm.core.verdict import VerdictRecord, read_at, write_at  # noqa: E402

USER = "gpatest"
LINE = b"step 123456 | loss 2.345678 | lr 3.0e-04 | grad_norm 0.91 | tokens/s 51234.5\n"


def verdict(job: int, d: Path, rng: int) -> dict:
    tasks = [{"file": str(d / "tasks" / f"0.{r}.log"), "name": f"0.{r}.log", "step": "0",
              "rank": r, "node": f"n{r // 4 + 1}", "size": 123456 + r, "last_output": 1.7e9,
              "exit_code": 1 if r == rng % 8 else 0, "signal": 0, "core_dumped": False,
              "end_time": 1.7e9} for r in range(8)]
    ev = [{"file": str(d / "tasks" / "0.0.log"), "line": 1000 + i,
           "text": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB "
                   f"(GPU {i}; 79.15 GiB total capacity; 77.0 GiB already allocated)"}
          for i in range(5)]
    return {"version": 1, "job_id": str(job), "attempt": 0, "attempt_path": str(d),
            "logs_dir": str(d / "tasks"), "failed": rng % 3 != 0,
            "job": {"name": f"train-{job}", "user": USER, "uid": 1001, "nodes": ["n1", "n2"],
                    "nodelist": "n[1-2]", "gpus": {"n1": "0-3", "n2": "0-3"},
                    "partition": "gpu", "account": "lab", "work_dir": "/home/u/run",
                    "start_time": 1.7e9 - 3600 + job, "end_time": 1.7e9 + job,
                    "run_time_s": 3600, "exit_code": 1, "signal": 0,
                    "slurm_state": "FAILED", "slurm_reason": "NonZeroExitCode"},
            "verdict": {"class": ("cuda_oom", "nccl_timeout", "python_exception")[rng % 3],
                        "domain": "workload", "confidence": 0.93, "root_rank": 0,
                        "root_node": "n1", "root_step": "0", "hint": "Lower the batch size.",
                        "detail": "", "evidence": ev, "cascades": []},
            "tasks": tasks, "nodes": {"n1": {"stage": "classified"}},
            "last_lines": {"file": str(d / "tasks" / "0.0.log"),
                           "lines": [LINE.decode().strip()] * 30},
            "notes": [], "time": 1.7e9 + job,
            "artifacts": {"budget": 20 << 20, "used": 1 << 20, "attached": [
                {"kind": "log", "name": f"0.{r}.log", "size": 123456,
                 "attached_size": 20000, "note": ""} for r in range(8)], "left_out": []},
            "report": {"status": "sent", "subject": f"[gpualert] FAILED job {job}"}}


def build(base: Path, jobs: int, log_gib: float) -> tuple[Path, int]:
    pw = pwd.getpwnam(USER)
    spool = base / "spool"
    spool.mkdir(mode=0o755)
    first = 500000
    for i in range(jobs):
        job = first + i
        d = spool / str(job)
        (d / "tasks").mkdir(parents=True)
        for p in (d, d / "tasks"):
            os.chown(p, pw.pw_uid, pw.pw_gid)
            p.chmod(0o700)
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        try:
            write_at(fd, VerdictRecord.from_json(verdict(job, d, i)))
        finally:
            os.close(fd)
    big = first  # its log: log_gib GiB of lines
    log = spool / str(big) / "tasks" / "0.0.log"
    block = LINE * ((1 << 20) // len(LINE))
    with open(log, "wb") as f:
        left = int(log_gib * (1 << 30))
        while left > 0:
            f.write(block[:left])
            left -= len(block)
    os.chown(log, pw.pw_uid, pw.pw_gid)
    return spool, big


def call(app, path: str, qs: str = "") -> tuple[str, int]:
    from wsgiref.util import setup_testing_defaults

    env: dict = {}
    setup_testing_defaults(env)
    env.update(PATH_INFO=path, QUERY_STRING=qs)
    got: dict = {}
    body = b"".join(app(env, lambda s, h: got.setdefault("s", s)))
    return got["s"], len(body)


def timed(fn, runs: int) -> float:
    fn()  # warm-up: templates compiled, the dentries cached
    xs = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t0)
    return statistics.median(xs)


def paired(fa, fb, runs: int) -> tuple[float, float]:
    """Medians of fa and fb timed in turn (a shared machine's load falls on both alike)."""
    fa(), fb()
    xa, xb = [], []
    for _ in range(runs):
        for f, xs in ((fa, xa), (fb, xb)):
            t0 = time.perf_counter()
            f()
            xs.append(time.perf_counter() - t0)
    return statistics.median(xa), statistics.median(xb)


def measure(spool: Path, big: int, runs: int) -> dict:
    """In the child, as the user."""
    from gpualert_slurm.core.spool import open_dir
    from gpualert_slurm.web.app import App

    app = App(Config(spool=str(spool)))
    out: dict = {}

    def read_verdicts(ids: list[str]) -> None:
        for j in ids:
            fd = open_dir(str(spool / j))
            try:
                read_at(fd)
            finally:
                os.close(fd)

    ids = sorted(os.listdir(spool))
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    status, size = call(app, "/")
    assert status.startswith("200"), status
    out["list_s"], out["verdicts_alone_s"] = paired(lambda: call(app, "/"),
                                                    lambda: read_verdicts(ids), runs)
    out["list_bytes"] = size
    status, size = call(app, f"/job/{big}")
    assert status.startswith("200") and size > 2000, status
    out["job_s"], out["verdict_alone_s"] = paired(lambda: call(app, f"/job/{big}"),
                                                  lambda: read_verdicts([str(big)]), runs)
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # the log viewer over the whole GiB: bounded memory whatever it reads
    t0 = time.perf_counter()
    status, size = call(app, f"/job/{big}/0/log/0.0.log", "tail=1")
    out["log_tail_s"] = time.perf_counter() - t0
    out["log_tail_bytes"] = size
    t0 = time.perf_counter()
    status, size = call(app, f"/job/{big}/0/log/0.0.log", "line=10000000")
    out["log_deep_line_s"] = time.perf_counter() - t0
    out["log_page_s"] = timed(lambda: call(app, f"/job/{big}/0/log/0.0.log",
                                           "off=524288000&first=1"), runs)
    rss2 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out.update(rss_before_kib=rss0, rss_pages_kib=rss1, rss_log_kib=rss2)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--log-gib", type=float, default=1.0)
    p.add_argument("--runs", type=int, default=7)
    a, _rest = p.parse_known_args()
    if os.geteuid() != 0:
        print("bench_web: run as root (it builds a spool of the test user's jobs)",
              file=sys.stderr)
        return 1
    base = Path(tempfile.mkdtemp(prefix="gpualert-bench-web-", dir="/tmp"))
    base.chmod(0o755)
    try:
        t0 = time.monotonic()
        spool, big = build(base, a.jobs, a.log_gib)
        print(f"spool: {a.jobs} jobs, a {a.log_gib:g} GiB log, built in "
              f"{time.monotonic() - t0:.1f} s", flush=True)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            code = 1
            try:
                pw = pwd.getpwnam(USER)
                os.setgroups([])
                os.setgid(pw.pw_gid)
                os.setuid(pw.pw_uid)
                os.write(w, json.dumps(measure(spool, big, a.runs)).encode())
                code = 0
            except BaseException as e:  # the parent says what failed
                os.write(w, json.dumps({"error": repr(e)}).encode())
            finally:
                os._exit(code)
        os.close(w)
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
        os.waitpid(pid, 0)
        res = json.loads(data or b'{"error": "no answer"}')
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if "error" in res:
        print(f"bench_web: FAILED: {res['error']}", file=sys.stderr)
        return 1
    ms = {k: v * 1000 for k, v in res.items() if k.endswith("_s")}
    print(f"list of {a.jobs} jobs:        {ms['list_s']:7.1f} ms (target <= 300)   "
          f"reading their {a.jobs} verdict.json alone: {ms['verdicts_alone_s']:.1f} ms "
          f"(x{res['list_s'] / res['verdicts_alone_s']:.2f}); page {res['list_bytes']} B")
    print(f"job page, {a.log_gib:g} GiB log:    {ms['job_s']:7.1f} ms (target <= 200)   "
          f"reading its verdict.json alone: {ms['verdict_alone_s']:.2f} ms "
          f"(x{res['job_s'] / res['verdict_alone_s']:.1f})")
    print(f"log viewer, a page at 500 MiB:  {ms['log_page_s']:7.1f} ms; last page (counts "
          f"every line): {ms['log_tail_s']:.0f} ms; line 10,000,000: "
          f"{ms['log_deep_line_s']:.0f} ms")
    print(f"memory (max RSS): {res['rss_before_kib'] / 1024:.1f} MiB before the first page, "
          f"{res['rss_pages_kib'] / 1024:.1f} MiB after the timed pages, "
          f"{res['rss_log_kib'] / 1024:.1f} MiB after reading the whole "
          f"{a.log_gib:g} GiB log in the viewer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
