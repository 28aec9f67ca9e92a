"""Build the held-out corpus: run every case for real, capture it like the tap, label it.

    python3 corpus/holdout/generate/make_holdout.py [--only PREFIX ...]

Runs as root (tmpfs mounts, dropping to `gpatest` for permission cases). Each case's command
writes stdout+stderr through one pipe; the bytes go unchanged to cases/<id>/run.<rank>.log and
the wait status to run.<rank>.exit (the tap's record). A case whose failure does not happen as
designed (its `expect` check fails) is dropped and reported, never kept or faked. The label is
the class of what really happened; the classifier is never consulted here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
HOLDOUT = os.path.dirname(HERE)
# The failing programs live once, in the corpus generator library (corpus/gen/progs/).
PROGS = os.path.join(os.path.dirname(HOLDOUT), "gen", "progs")
PY = "/opt/gpualert/corpus-venv/bin/python"  # Debian python + CPU torch
SYSPY = "/usr/bin/python3"  # has PyYAML
WORKROOT = "/tmp/holdout-work"
BIN = os.path.join(WORKROOT, "bin")
USER = "gpatest"


@dataclass
class Case:
    id: str
    cls: str
    argv: list[str]
    expect: dict = field(default_factory=dict)  # rc: int|"nonzero", sig: int, text: str
    user: str | None = None
    rlimit_as: int | None = None
    kill_after: float | None = None  # seconds: SIGKILL (kill_sig) from outside
    kill_sig: int = signal.SIGKILL
    kill_child: bool = False  # kill the command's child (a shell then reports it)
    watchdog: float | None = None  # hang: stop after this much silence
    setup: Callable[[], None] | None = None
    teardown: Callable[[], None] | None = None
    ranks: int = 0  # >0: multi-rank gloo launch
    launched: list[int] | None = None
    stuck: int | None = None
    note: str = ""


def slurp(path: str) -> str:
    with open(path, errors="replace") as f:
        return f.read()


# ------------------------------------------------------------------ capture (the tap's contract)
def capture(
    argv: list[str],
    log: str,
    *,
    env: dict | None = None,
    user: str | None = None,
    rlimit_as: int | None = None,
    kill_after: float | None = None,
    kill_sig: int = signal.SIGKILL,
    kill_child: bool = False,
    watchdog: float | None = None,
    stop: threading.Event | None = None,
    cwd: str | None = None,
) -> dict:
    def pre() -> None:
        if rlimit_as:
            resource.setrlimit(resource.RLIMIT_AS, (rlimit_as, rlimit_as))

    kw: dict = {}
    if user:
        kw.update(user=user, group=user, extra_groups=[])
        env = dict(env or os.environ, HOME=pwd.getpwnam(user).pw_dir, USER=user)
    r, w = os.pipe()
    p = subprocess.Popen(
        argv,
        stdout=w,
        stderr=w,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
        start_new_session=True,
        preexec_fn=pre,
        **kw,
    )
    os.close(w)
    out = open(log, "wb")  # noqa: SIM115 - closed once the pump has drained the pipe

    def pump() -> None:
        while True:
            b = os.read(r, 65536)
            if not b:
                break
            out.write(b)
            out.flush()
        os.close(r)

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    start = time.time()
    sent = None
    while True:
        pid, status = os.waitpid(p.pid, os.WNOHANG)
        if pid:
            break
        now = time.time()
        if kill_after is not None and sent is None and now - start >= kill_after:
            target = p.pid
            if kill_child:
                kids = slurp(f"/proc/{p.pid}/task/{p.pid}/children").split()
                target = int(kids[0]) if kids else p.pid
            os.kill(target, kill_sig)
            sent = now
        if watchdog is not None and now - os.path.getmtime(log) >= watchdog:
            if sent is None:
                os.kill(p.pid, signal.SIGTERM)
                sent = now
            elif now - sent > 3:
                os.kill(p.pid, signal.SIGKILL)
        if stop is not None and stop.is_set() and sent is None:
            os.kill(p.pid, signal.SIGTERM)  # the launcher stops a stuck rank
            sent = now
        if now - start > 120:  # bounded: nothing here should run this long
            os.kill(p.pid, signal.SIGKILL)
        time.sleep(0.05)
    end = time.time()
    p.returncode = 0  # reaped above; keep Popen from waiting again
    with contextlib.suppress(ProcessLookupError):  # this case's leftovers (workers)
        os.killpg(p.pid, signal.SIGKILL)
    t.join(10)
    out.close()
    rec = {
        "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "core_dumped": bool(os.WIFSIGNALED(status) and os.WCOREDUMP(status)),
        "end_time": round(end, 3),
        "pid": p.pid,
        "status": status,
    }
    return rec


# ------------------------------------------------------------------ local storage servers
class Servers:
    """Misbehaving TCP servers on 127.0.0.1 (storage_io)."""

    def __init__(self) -> None:
        self.socks: list[socket.socket] = []

    def _listen(self) -> socket.socket:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        self.socks.append(s)
        return s

    def start(self, mode: str) -> int:
        s = self._listen()
        held: list[socket.socket] = []

        def serve() -> None:
            while True:
                try:
                    c, _ = s.accept()
                except OSError:
                    return
                if mode == "stall":
                    held.append(c)  # accept, never answer
                elif mode == "reset":
                    c.recv(4096)
                    c.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                    )
                    c.close()  # RST
                elif mode == "partial":
                    c.recv(4096)
                    c.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                        b"Content-Length: 1048576\r\n\r\n" + b"\x00" * 20000
                    )
                    c.close()

        threading.Thread(target=serve, daemon=True).start()
        return s.getsockname()[1]

    def free_port(self) -> int:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        return port

    def close(self) -> None:
        for s in self.socks:
            s.close()


# ------------------------------------------------------------------ native builds
def build() -> None:
    os.makedirs(BIN, exist_ok=True)
    nat = os.path.join(PROGS, "native")
    cmds = [
        ["gcc", "-O0", "-o", f"{BIN}/crash", f"{nat}/crash.c"],
        ["g++", "-O0", "-o", f"{BIN}/thrower", f"{nat}/cxx.cpp"],
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-DPYMOD=fastops",
            "-DMISSING=fastops_simd_dot",
            "-I/usr/include/python3.11",
            "-o",
            f"{BIN}/fastops.cpython-311-x86_64-linux-gnu.so",
            f"{nat}/ext.c",
        ],
        ["gcc", "-shared", "-fPIC", "-o", f"{BIN}/libhshared.so", f"{nat}/stublib.c"],
        [
            "gcc",
            "-o",
            f"{BIN}/libuse",
            f"{nat}/needlib.c",
            f"-L{BIN}",
            "-lhshared",
            f"-Wl,-rpath,{BIN}",
        ],
    ]
    for c in cmds:
        subprocess.run(c, check=True)
    os.remove(f"{BIN}/libhshared.so")  # the program's library is gone at run time


def hf(scn: str, *args: str, py: str = PY) -> list[str]:
    return [py, os.path.join(PROGS, "hfail.py"), scn, os.path.join(WORKROOT, "w", scn), *args]


def tmpfs(path: str) -> tuple[Callable[[], None], Callable[[], None]]:
    def up() -> None:
        os.makedirs(path, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512K", "tmpfs", path], check=True)

    def down() -> None:
        subprocess.run(["umount", path], check=False)

    return up, down


def perm_setup() -> None:
    d = os.path.join(WORKROOT, "perm")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    os.chmod(WORKROOT, 0o755)
    os.chmod(d, 0o755)
    with open(os.path.join(d, "secret_token.txt"), "w") as f:
        f.write("tok\n")
    os.chmod(os.path.join(d, "secret_token.txt"), 0o600)
    with open(os.path.join(d, "prepare.sh"), "w") as f:
        f.write("#!/bin/sh\necho prepared\n")
    os.chmod(os.path.join(d, "prepare.sh"), 0o644)
    import sqlite3

    db = sqlite3.connect(os.path.join(d, "cache.db"))
    db.execute("create table kv(k text, v text)")
    db.commit()
    db.close()
    os.chmod(os.path.join(d, "cache.db"), 0o644)
    wd = os.path.join(WORKROOT, "w")
    os.makedirs(wd, exist_ok=True)
    os.chmod(wd, 0o1777)


def cases(srv: Servers) -> list[Case]:
    P = os.path.join(WORKROOT, "perm")
    C: list[Case] = []
    nz = {"rc": "nonzero"}

    def add(id_: str, cls: str, argv: list[str], **kw) -> None:
        C.append(Case(id_, cls, argv, **kw))

    # python_exception
    for i, (s, txt) in enumerate(
        [
            ("exc_json", "JSONDecodeError"),
            ("exc_csv", "field larger"),
            ("exc_numpy", "broadcast"),
            ("exc_torch_shape", "mat1"),
            ("exc_argparse", "invalid float"),
            ("exc_sqlite", "no such table"),
            ("exc_asyncio", "KeyError"),
            ("exc_assert", "AssertionError"),
            ("exc_thread_pool", "UnicodeEncodeError"),
        ]
    ):
        add(f"h-pyexc-{i:02d}", "python_exception", hf(s), expect={"rc": "nonzero", "text": txt})
    add(
        "h-pyexc-09",
        "python_exception",
        hf("exc_yaml", py=SYSPY),
        expect={"rc": "nonzero", "text": "ScannerError"},
    )
    # import_error
    add("h-imp-00", "import_error", hf("imp_missing"), expect={"rc": 1, "text": "apex"})
    add("h-imp-01", "import_error", hf("imp_name"), expect={"rc": 1, "text": "cannot import name"})
    add(
        "h-imp-02", "import_error", hf("imp_ext", BIN), expect={"rc": 1, "text": "undefined symbol"}
    )
    add(
        "h-imp-03", "import_error", hf("imp_ctypes"), expect={"rc": 1, "text": "cannot open shared"}
    )
    add("h-imp-04", "import_error", hf("imp_metadata"), expect={"rc": 1, "text": "flash-attn"})
    add(
        "h-imp-05",
        "import_error",
        hf("imp_torch_missing_sub"),
        expect={"rc": 1, "text": "DataLoader2"},
    )
    add("h-imp-06", "import_error", [f"{BIN}/libuse"], expect={"rc": 127, "text": "libhshared"})
    add(
        "h-imp-07",
        "import_error",
        ["bash", "-c", f"echo 'launching eval'; {PY} -m lm_eval_harness --tasks hellaswag"],
        expect={"rc": 1, "text": "No module named"},
    )
    # file_not_found
    for i, s in enumerate(
        ["fnf_open", "fnf_npload", "fnf_torchload", "fnf_shutil", "fnf_subprocess", "fnf_chdir"]
    ):
        add(f"h-fnf-{i:02d}", "file_not_found", hf(s), expect={"rc": 1, "text": "No such file"})
    add("h-fnf-06", "file_not_found", [f"{BIN}/crash", "solver-fopen"], expect={"rc": 2})
    add(
        "h-fnf-07",
        "file_not_found",
        [
            "bash",
            "-c",
            "set -e; echo 'stage 1: tokenize'; source /opt/envs/nlp/setup_env.sh; echo done",
        ],
        expect={"rc": "nonzero", "text": "No such file"},
    )
    # permission_denied (as gpatest)
    for i, s in enumerate(
        ["perm_read", "perm_mkdir", "perm_torchsave", "perm_kill", "perm_exec", "perm_sqlite"]
    ):
        add(
            f"h-perm-{i:02d}", "permission_denied", hf(s, P), user=USER, expect=nz, setup=perm_setup
        )
    add(
        "h-perm-06",
        "permission_denied",
        ["bash", "-c", f"echo 'writing results'; echo 0.93 > {P}/results.txt && echo saved"],
        user=USER,
        expect={"rc": 1, "text": "Permission denied"},
        setup=perm_setup,
    )
    # disk_full: a fresh 512K tmpfs per case
    full = [
        ("full_write", "hf"),
        ("full_npsave", "hf"),
        ("full_torchsave", "hf"),
        ("full_sqlite", "hf"),
        ("full_zip", "hf"),
        ("dd", "sh"),
        ("tar", "sh"),
    ]
    for i, (s, kind) in enumerate(full):
        mnt = os.path.join(WORKROOT, f"full{i}")
        up, down = tmpfs(mnt)
        if kind == "hf":
            argv = hf(s, mnt)
        elif s == "dd":
            argv = [
                "bash",
                "-c",
                f"echo 'staging dataset to {mnt}'; "
                f"dd if=/dev/urandom of={mnt}/stage.bin bs=64k count=64",
            ]
        else:
            argv = [
                "bash",
                "-c",
                f"mkdir -p {WORKROOT}/src && head -c 2000000 /dev/urandom > {WORKROOT}/src/blob"
                f" && echo 'archiving outputs' && tar cf {mnt}/out.tar -C {WORKROOT} src",
            ]
        add(
            f"h-full-{i:02d}",
            "disk_full",
            argv,
            setup=up,
            teardown=down,
            expect={"rc": "nonzero", "text": ("full" if s == "full_sqlite" else "")},
        )
    # storage_io
    add("h-io-00", "storage_io", hf("io_urllib_stall", str(srv.start("stall"))), expect=nz)
    add(
        "h-io-01",
        "storage_io",
        hf("io_reset", str(srv.start("reset"))),
        expect={"rc": 1, "text": "reset"},
    )
    add(
        "h-io-02",
        "storage_io",
        hf("io_partial", str(srv.start("partial"))),
        expect={"rc": 1, "text": "IncompleteRead"},
    )
    add("h-io-03", "storage_io", hf("io_retry", str(srv.start("stall"))), expect=nz)
    add(
        "h-io-04",
        "storage_io",
        hf("io_refused", str(srv.free_port())),
        expect={"rc": 1, "text": "refused"},
    )
    add("h-io-05", "storage_io", hf("io_eio"), expect={"rc": 1, "text": "Input/output error"})
    # checkpoint_corrupt
    for i, s in enumerate(
        ["ckpt_trunc", "ckpt_garbage", "ckpt_pickle", "ckpt_npz", "ckpt_flip", "ckpt_empty"]
    ):
        add(f"h-ckpt-{i:02d}", "checkpoint_corrupt", hf(s), expect={"rc": 1})
    # segfault
    add("h-segv-00", "segfault", hf("segv_ctypes_fh"), expect={"sig": 11})
    add("h-segv-01", "segfault", hf("segv_ctypes_quiet"), expect={"sig": 11})
    add("h-segv-02", "segfault", hf("segv_abort"), expect={"sig": 6})
    add("h-segv-03", "segfault", [f"{BIN}/crash", "solver-null"], expect={"sig": 11})
    add("h-segv-04", "segfault", [f"{BIN}/crash", "solver-stack"], expect={"sig": 11})
    add("h-segv-05", "segfault", [f"{BIN}/crash", "solver-abort"], expect={"sig": 6})
    add("h-segv-06", "segfault", [f"{BIN}/thrower", "graph-runtime"], expect={"sig": 6})
    add(
        "h-segv-07",
        "segfault",
        [
            "bash",
            "-c",
            f"echo 'running solver'; {BIN}/crash solver-null; rc=$?; "
            'echo "solver exited rc=$rc"; exit $rc',
        ],
        expect={"rc": 139},
    )
    # killed: SIGKILL (once SIGTERM) from outside, nothing in the log says why
    add("h-killed-00", "killed", hf("hang_sleep"), kill_after=3)
    add("h-killed-01", "killed", hf("ok_torch"), kill_after=2.5)
    add(
        "h-killed-02",
        "killed",
        ["bash", "-c", 'for i in $(seq 1 100); do echo "shard $i/100 done"; sleep 0.2; done'],
        kill_after=2,
    )
    add(
        "h-killed-03",
        "killed",
        ["bash", "-c", f"{PY} {PROGS}/hfail.py hang_queue {WORKROOT}/w/kq; exit $?"],
        kill_after=4,
        kill_child=True,
        expect={"rc": 137},
    )
    add(
        "h-killed-04",
        "killed",
        hf("hang_pipe"),
        kill_after=2,
        kill_sig=signal.SIGTERM,
        expect={"sig": 15},
    )
    for c in C[-5:]:
        c.expect = c.expect or {"sig": 9}
    # host_oom: real RLIMIT_AS
    G = 1 << 30
    add(
        "h-oom-00",
        "host_oom",
        hf("oom_bytes"),
        rlimit_as=1 * G,
        expect={"rc": 1, "text": "MemoryError"},
    )
    add(
        "h-oom-01",
        "host_oom",
        hf("oom_numpy"),
        rlimit_as=2 * G,
        expect={"rc": 1, "text": "allocate"},
    )
    add("h-oom-02", "host_oom", hf("oom_torch"), rlimit_as=3 * G, expect={"rc": 1})
    add(
        "h-oom-03",
        "host_oom",
        hf("oom_list"),
        rlimit_as=1 * G,
        expect={"rc": 1, "text": "MemoryError"},
    )
    add(
        "h-oom-04",
        "host_oom",
        [f"{BIN}/thrower", "graph-alloc"],
        rlimit_as=2 * G,
        expect={"sig": 6, "text": "bad_alloc"},
    )
    add("h-oom-05", "host_oom", [f"{BIN}/crash", "solver-malloc"], rlimit_as=1 * G, expect={"rc": 12})
    # nan_divergence
    for i, s in enumerate(
        ["nan_isfinite", "nan_anomaly", "nan_clip", "nan_numpy", "nan_assert", "nan_exit"]
    ):
        add(f"h-nan-{i:02d}", "nan_divergence", hf(s), expect={"rc": 1})
    # dataloader_worker
    for i, s in enumerate(["dl_sigkill", "dl_exit", "dl_segv", "dl_abort", "dl_term"]):
        add(
            f"h-dl-{i:02d}",
            "dataloader_worker",
            hf(s),
            expect={"rc": 1, "text": "DataLoader worker"},
        )
    # device_mismatch
    for i, s in enumerate(["dev_linear", "dev_cat", "dev_lstm", "dev_loss", "dev_mask"]):
        add(f"h-dev-{i:02d}", "device_mismatch", hf(s), expect={"rc": 1, "text": "meta"})
    # hang: watchdog after 5 s of silence
    for i, s in enumerate(["hang_lock", "hang_sleep", "hang_pipe", "hang_queue", "hang_child"]):
        add(f"h-hang-{i:02d}", "hang", hf(s), watchdog=5.0, expect={"sig": 15})
    # success
    for i, s in enumerate(
        ["ok_warnings", "ok_progress", "ok_handled", "ok_numpy_warn", "ok_torch"]
    ):
        add(f"h-ok-{i:02d}", "success", hf(s), expect={"rc": 0})
    add(
        "h-ok-05",
        "success",
        hf("ok_retry", str(srv.free_port())),
        expect={"rc": 0, "text": "refused"},
    )
    # unknown
    add("h-unk-00", "unknown", hf("unk_done"), expect={"rc": 1})
    add("h-unk-01", "unknown", hf("unk_threshold"), expect={"rc": 3})
    add("h-unk-02", "unknown", hf("unk_silent"), expect={"rc": 255})
    add("h-unk-03", "unknown", [f"{BIN}/crash", "solver-exit42"], expect={"rc": 42})
    add(
        "h-unk-04",
        "unknown",
        [
            "bash",
            "-c",
            "echo 'checking outputs'; ls /tmp >/dev/null; test -s /tmp/holdout-work/w/none.flag",
        ],
        expect={"rc": 1},
    )
    # collective_timeout: gloo on CPU
    add("h-coll-00", "collective_timeout", ["stuck"], ranks=2, stuck=1)
    add("h-coll-01", "collective_timeout", ["stuck"], ranks=3, stuck=0)
    add("h-coll-02", "collective_timeout", ["stuck"], ranks=3, stuck=2)
    add("h-coll-03", "collective_timeout", ["rdzv"], ranks=3, launched=[0, 1])
    add("h-coll-04", "collective_timeout", ["rdzv"], ranks=2, launched=[0])
    return C


def run_multi(c: Case, d: str) -> tuple[list[dict], list[dict]]:
    port = Servers().free_port()
    launched = c.launched if c.launched is not None else list(range(c.ranks))
    recs: dict[int, dict] = {}
    stop = threading.Event()
    done: list[int] = []

    def one(rank: int) -> None:
        env = dict(
            os.environ,
            RANK=str(rank),
            WORLD_SIZE=str(c.ranks),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        argv = [PY, os.path.join(PROGS, "dist_hold.py"), c.argv[0], str(c.stuck or 0)]
        recs[rank] = capture(
            argv,
            os.path.join(d, f"run.{rank}.log"),
            env=env,
            stop=stop if rank == c.stuck else None,
        )
        done.append(rank)

    ts = [threading.Thread(target=one, args=(r,)) for r in launched]
    for t in ts:
        t.start()
    deadline = time.time() + 90
    # the launcher stops the stuck rank once every other rank has ended
    while time.time() < deadline and len([r for r in done if r != c.stuck]) < len(
        [r for r in launched if r != c.stuck]
    ):
        time.sleep(0.2)
    time.sleep(1)
    stop.set()
    for t in ts:
        t.join(30)
    tasks = []
    for r in launched:
        rec = recs[r]
        tasks.append(
            {
                "log": f"cases/{c.id}/run.{r}.log",
                "rank": r,
                "node": None,
                "step": "run",
                "exit_code": rec["exit_code"],
                "signal": rec["signal"],
                "core_dumped": rec["core_dumped"],
                "end_time": rec["end_time"],
            }
        )
    return tasks, [recs[r] for r in launched]


def check(c: Case, rec: dict, text: str) -> str | None:
    e = c.expect
    if "sig" in e and rec["signal"] != e["sig"]:
        return f"expected signal {e['sig']}, got {rec}"
    if "rc" in e:
        rc = rec["exit_code"]
        if e["rc"] == "nonzero" and not rc:
            return f"expected a non-zero exit, got {rec}"
        if e["rc"] != "nonzero" and rc != e["rc"]:
            return f"expected exit {e['rc']}, got {rec}"
    if e.get("text") and e["text"] not in text:
        return f"log lacks {e['text']!r}"
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=[], help="id prefixes to rebuild")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("make_holdout.py: run as root (tmpfs mounts, dropping to gpatest)", file=sys.stderr)
        return 2
    os.makedirs(WORKROOT, exist_ok=True)
    build()
    perm_setup()
    srv = Servers()
    labels_path = os.path.join(HOLDOUT, "labels.jsonl")
    labels: dict[str, dict] = {}
    if os.path.exists(labels_path):
        for line in slurp(labels_path).splitlines():
            lab = json.loads(line)
            labels[lab["id"]] = lab
    dropped = []
    todo = [c for c in cases(srv) if not a.only or any(c.id.startswith(p) for p in a.only)]
    for c in todo:
        d = os.path.join(HOLDOUT, "cases", c.id)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        labels.pop(c.id, None)
        if c.setup:
            c.setup()
        try:
            if c.ranks:
                tasks, recs = run_multi(c, d)
                cmd = f"dist_hold.py {c.argv[0]} x{len(tasks)} of world {c.ranks}"
                bad = [r for r in recs if r["exit_code"] == 0]
                why = "a rank finished cleanly" if bad else None
                codes = [t["exit_code"] for t in tasks if t["rank"] != c.stuck]
                exit_code, sig = (
                    (max(x for x in codes if x is not None) if any(codes) else None),
                    None,
                )
                root = c.stuck
                text = "".join(
                    slurp(os.path.join(HOLDOUT, t["log"])) for t in tasks
                )
                if not why and "imeout" not in text and "imed out" not in text:
                    why = "no timeout in the logs"
            else:
                log = os.path.join(d, "run.0.log")
                rec = capture(
                    c.argv,
                    log,
                    user=c.user,
                    rlimit_as=c.rlimit_as,
                    kill_after=c.kill_after,
                    kill_sig=c.kill_sig,
                    kill_child=c.kill_child,
                    watchdog=c.watchdog,
                )
                tasks = [
                    {
                        "log": f"cases/{c.id}/run.0.log",
                        "rank": 0,
                        "node": None,
                        "step": "run",
                        "exit_code": rec["exit_code"],
                        "signal": rec["signal"],
                        "core_dumped": rec["core_dumped"],
                        "end_time": rec["end_time"],
                    }
                ]
                recs = [rec]
                exit_code, sig, root = rec["exit_code"], rec["signal"], None
                text = slurp(log)
                why = check(c, rec, text)
                cmd = " ".join(x.replace(HOLDOUT, "corpus/holdout") for x in c.argv)
                if c.user:
                    cmd = f"(as {c.user}) {cmd}"
                if c.rlimit_as:
                    cmd = f"(RLIMIT_AS={c.rlimit_as >> 20}M) {cmd}"
                if c.kill_after is not None:
                    cmd += f"  [signal {c.kill_sig} from outside after {c.kill_after}s]"
        finally:
            if c.teardown:
                c.teardown()
        for t, rec in zip(tasks, recs, strict=True):
            ex = {
                "node": None,
                "step": "run",
                "rank": t["rank"],
                "pid": rec["pid"],
                "exit_code": rec["exit_code"],
                "signal": rec["signal"],
                "core_dumped": rec["core_dumped"],
                "end_time": rec["end_time"],
                "status": rec["status"],
            }
            with open(os.path.join(HOLDOUT, t["log"])[:-4] + ".exit", "w") as f:
                json.dump(ex, f)
        if why:
            print(f"DROP {c.id}: {why}", flush=True)
            dropped.append(c.id)
            shutil.rmtree(d, ignore_errors=True)
            continue
        hang_t = silence = None
        if c.watchdog:
            hang_t = c.watchdog
            silence = round(
                max(t["end_time"] for t in tasks)
                - max(os.path.getmtime(os.path.join(HOLDOUT, t["log"])) for t in tasks),
                3,
            )
        labels[c.id] = {
            "id": c.id,
            "class": c.cls,
            "root_rank": root,
            "source": "reproduced",
            "command": cmd,
            "how": None,
            "exit_code": exit_code,
            "signal": sig,
            "slurm_state": None,
            "slurm_reason": None,
            "hang_threshold_s": hang_t,
            "silence_s": silence,
            "tasks": tasks,
            "kernel_log": None,
        }
        print(f"ok   {c.id:14s} {c.cls:20s} exit={exit_code} sig={sig}", flush=True)
    srv.close()
    with open(labels_path, "w") as f:
        for k in sorted(labels):
            f.write(json.dumps(labels[k]) + "\n")
    print(f"{len(labels)} labelled cases; dropped: {' '.join(dropped) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
