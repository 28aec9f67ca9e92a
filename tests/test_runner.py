"""`gpualert run` with real processes that really exit, crash, get killed and misbehave."""

import contextlib
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
GPUALERT = [sys.executable, "-m", "gpualert_slurm", "run"]


def no_core():
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run(args, log_dir, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("timeout", 60)
    return subprocess.run([*GPUALERT, "--log-dir", str(log_dir), "--", *args], env=ENV,
                          preexec_fn=no_core, **kw)


def records(log_dir):
    return (json.loads((log_dir / "run.json").read_text()),
            json.loads((log_dir / "exit.json").read_text()))


@pytest.mark.parametrize("code", [0, 3, 255])
def test_exit_code_is_the_childs(tmp_path, code):
    r = run([sys.executable, "-c", f"print('hello'); raise SystemExit({code})"], tmp_path / "l")
    assert r.returncode == code
    assert r.stdout == b"hello\n"
    run_rec, exit_rec = records(tmp_path / "l")
    assert run_rec["cmd"][0] == sys.executable and run_rec["pid"] > 0 and run_rec["host"]
    assert exit_rec["exit_code"] == code and exit_rec["signal"] is None
    assert exit_rec["returncode"] == code
    assert exit_rec["end_time"] >= run_rec["start_time"]
    assert (tmp_path / "l" / "output.log").read_bytes() == b"hello\n"


def test_log_exists_before_the_child_runs(tmp_path):
    # The child itself looks for run.json and output.log: the pre-launch guarantee.
    d = tmp_path / "l"
    code = ("import os,sys; d=sys.argv[1]; "
            "sys.exit(0 if os.path.exists(d+'/run.json') and os.path.exists(d+'/output.log') "
            "else 9)")
    assert run([sys.executable, "-c", code, str(d)], d).returncode == 0


def test_segfault_is_128_plus_signal(tmp_path):
    r = run([sys.executable, "-c", "import ctypes; ctypes.string_at(0)"], tmp_path / "l")
    assert r.returncode == 128 + signal.SIGSEGV
    _, exit_rec = records(tmp_path / "l")
    assert exit_rec["signal"] == signal.SIGSEGV and exit_rec["exit_code"] is None


def test_sigkill_by_someone_else(tmp_path):
    pidfile = tmp_path / "child.pid"
    p = subprocess.Popen([*GPUALERT, "--log-dir", str(tmp_path / "l"), "--", sys.executable,
                          "-c", "import os,sys,time; open(sys.argv[1],'w').write(str(os.getpid()));"
                          " time.sleep(60)", str(pidfile)], env=ENV)
    deadline = time.time() + 20
    while not (pidfile.exists() and pidfile.read_text()):
        assert time.time() < deadline, "child never started"
        time.sleep(0.05)
    os.kill(int(pidfile.read_text()), signal.SIGKILL)
    assert p.wait(timeout=20) == 128 + signal.SIGKILL
    assert records(tmp_path / "l")[1]["signal"] == signal.SIGKILL


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGUSR1])
def test_signals_are_forwarded(tmp_path, sig):
    ready = tmp_path / "ready"
    code = ("import signal,sys,time,pathlib\n"
            f"signal.signal({int(sig)}, lambda *a: (print('got', {int(sig)}, flush=True),"
            " sys.exit(7)))\n"
            "pathlib.Path(sys.argv[1]).write_text('x')\n"
            "time.sleep(60)\n")
    p = subprocess.Popen([*GPUALERT, "--log-dir", str(tmp_path / "l"), "--", sys.executable,
                          "-c", code, str(ready)], env=ENV, stdout=subprocess.PIPE)
    deadline = time.time() + 20
    while not ready.exists():
        assert time.time() < deadline
        time.sleep(0.05)
    p.send_signal(sig)  # to gpualert, not to the child
    out, _ = p.communicate(timeout=20)
    assert p.returncode == 7
    assert out == f"got {int(sig)}\n".encode()


def test_missing_program_is_127_and_logged(tmp_path):
    r = run(["/nonexistent/prog", "x"], tmp_path / "l")
    assert r.returncode == 127
    assert b"gpualert: cannot run '/nonexistent/prog': No such file or directory" in r.stderr
    assert b"No such file" in (tmp_path / "l" / "output.log").read_bytes()
    exit_rec = records(tmp_path / "l")[1]
    assert exit_rec["exit_code"] == 127 and "No such file" in exit_rec["exec_error"]


def test_not_executable_is_126_and_logged(tmp_path):
    f = tmp_path / "script.sh"
    f.write_text("#!/bin/sh\necho hi\n")
    f.chmod(0o644)
    r = run([str(f)], tmp_path / "l")
    assert r.returncode == 126
    assert b"Permission denied" in r.stderr
    assert "Permission denied" in records(tmp_path / "l")[1]["exec_error"]


def test_100mb_binary_output_is_byte_identical(tmp_path):
    # NULs, every byte value, no trailing newline; the expected digest is computed here.
    gen = ("import sys,hashlib\n"
           "block=bytes(range(256))*4096+b'\\0\\0tail'\n"
           "n=0; w=sys.stdout.buffer\n"
           "while n < 100*1024*1024:\n"
           "    w.write(block); n+=len(block)\n"
           "w.write(b'end-without-newline'); w.flush()\n")
    block = bytes(range(256)) * 4096 + b"\0\0tail"
    h, n = hashlib.sha256(), 0
    while n < 100 * 1024 * 1024:
        h.update(block)
        n += len(block)
    h.update(b"end-without-newline")
    n += len(b"end-without-newline")
    out = tmp_path / "stdout.bin"
    with open(out, "wb") as f:
        r = run([sys.executable, "-c", gen], tmp_path / "l", stdout=f, capture_output=False,
                stderr=subprocess.PIPE, timeout=300)
    assert r.returncode == 0, r.stderr
    for p in (out, tmp_path / "l" / "output.log"):
        assert p.stat().st_size == n
        with open(p, "rb") as f:
            assert hashlib.file_digest(f, "sha256").hexdigest() == h.hexdigest()


def test_stdout_and_stderr_stay_separate(tmp_path):
    code = ("import sys,time\n"
            "for i in range(50):\n"
            "    sys.stdout.write(f'out{i}\\n'); sys.stdout.flush()\n"
            "    sys.stderr.write(f'err{i}\\n'); sys.stderr.flush()\n")
    r = run([sys.executable, "-c", code], tmp_path / "l")
    assert r.returncode == 0
    assert r.stdout == "".join(f"out{i}\n" for i in range(50)).encode()
    assert r.stderr == "".join(f"err{i}\n" for i in range(50)).encode()
    log = (tmp_path / "l" / "output.log").read_bytes()
    assert sorted(log.splitlines()) == sorted((r.stdout + r.stderr).splitlines())


def test_grandchild_holding_the_pipe_does_not_hang_us(tmp_path):
    # We return when the child exits, after copying what is there, within the flush bound.
    pidfile = tmp_path / "gc.pid"
    t0 = time.monotonic()
    r = run(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; echo parent-done"], tmp_path / "l")
    elapsed = time.monotonic() - t0
    with contextlib.suppress(Exception):
        os.kill(int(pidfile.read_text()), signal.SIGKILL)
    assert r.returncode == 0
    assert r.stdout == b"parent-done\n"
    assert elapsed < 10
    assert b"stopped copying" in r.stderr
    exit_rec = records(tmp_path / "l")[1]
    assert exit_rec["log_complete"] is False and "held open" in exit_rec["output_note"]


def test_unwritable_log_dir_still_runs_the_command(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = run([sys.executable, "-c", "print('still here'); raise SystemExit(5)"],
            blocker / "sub")
    assert r.returncode == 5
    assert r.stdout == b"still here\n"
    assert b"gpualert: warning: cannot create the log in" in r.stderr


@pytest.fixture
def tiny_fs(tmp_path):
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], check=True)
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_disk_full_mid_run_keeps_output_and_exit_code(tmp_path, tiny_fs):
    code = ("import sys\n"
            "for i in range(4000): sys.stdout.write('x'*200+'\\n')\n"
            "sys.stdout.flush(); raise SystemExit(4)\n")
    r = run([sys.executable, "-c", code], tiny_fs / "l")
    assert r.returncode == 4
    assert len(r.stdout) == 4000 * 201  # all of it reached our stdout
    assert b"gpualert: warning: cannot" in r.stderr
    assert b"No space left on device" in r.stderr


def test_usage_errors(tmp_path):
    r = subprocess.run([*GPUALERT], env=ENV, capture_output=True, text=True)
    assert r.returncode == 2 and "no command given" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([*GPUALERT, "--bogus", "--", "true"], env=ENV, capture_output=True,
                       text=True)
    assert r.returncode == 2 and "unknown option --bogus" in r.stderr


def test_default_dir_under_gpualert_run_dir(tmp_path):
    env = {**ENV, "GPUALERT_RUN_DIR": str(tmp_path / "runs")}
    r = subprocess.run([*GPUALERT, "--name", "my job", "--", "true"], env=env,
                       capture_output=True)
    assert r.returncode == 0
    (d,) = list((tmp_path / "runs").iterdir())
    assert d.name.endswith("-my_job")
    assert json.loads((d / "run.json").read_text())["name"] == "my job"
    assert (d / "exit.json").exists()


def test_classify_adds_one_line_and_keeps_the_exit_code(tmp_path):
    r = subprocess.run([*GPUALERT, "--classify", "--log-dir", str(tmp_path / "l"), "--",
                        sys.executable, "-c", "raise MemoryError()"], env=ENV,
                       capture_output=True, timeout=60)
    assert r.returncode == 1
    last = r.stderr.decode().rstrip("\n").splitlines()[-1]
    # With the classifier installed: its diagnosis; without it: a line saying so. Never a crash.
    assert last.startswith(("gpualert: diagnosis: ", "gpualert: --classify: classifier not"))
    assert "Traceback" not in last


def test_ctrl_c_on_a_terminal_reaches_the_child_once(tmp_path):
    # The tty sends SIGINT to the whole foreground group (us and the child): we must not add a
    # second one. The child counts what it gets for a while after the first.
    import pty

    ready = tmp_path / "ready"
    code = ("import signal,sys,time,pathlib\n"
            "n=[0]\n"
            "signal.signal(signal.SIGINT, lambda *a: n.__setitem__(0, n[0]+1))\n"
            "pathlib.Path(sys.argv[1]).write_text('x')\n"
            "t=time.time()\n"
            "while not n[0] and time.time()-t < 30: time.sleep(0.01)\n"
            "time.sleep(1.0)\n"
            "print('sigints', n[0], flush=True)\n")
    pid, master = pty.fork()
    if pid == 0:  # child: a session leader whose controlling terminal is the pty
        os.environ.update(ENV)
        os.execv(sys.executable, [*GPUALERT, "--log-dir", str(tmp_path / "l"), "--",
                                  sys.executable, "-c", code, str(ready)])
    deadline = time.time() + 20
    while not ready.exists():
        assert time.time() < deadline
        time.sleep(0.05)
    os.write(master, b"\x03")
    out = b""
    while True:
        try:
            b = os.read(master, 4096)
        except OSError:  # EIO: the other side closed
            break
        if not b:
            break
        out += b
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert b"sigints 1\r\n" in out, out


def test_without_pidfd_the_polling_fallback_works(tmp_path):
    # Old kernels have no pidfd_open: the same results through waitpid polling.
    pidfile = tmp_path / "gc.pid"
    code = ("import os, sys\n"
            "del os.pidfd_open\n"
            "from gpualert_slurm.commands.run import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    r = subprocess.run([sys.executable, "-c", code, "--log-dir", str(tmp_path / "l"), "--", "sh",
                        "-c", f"sleep 60 & echo $! > {pidfile}; echo hi; exit 6"],
                       env=ENV, capture_output=True, timeout=30)
    with contextlib.suppress(Exception):
        os.kill(int(pidfile.read_text()), signal.SIGKILL)
    assert r.returncode == 6 and r.stdout == b"hi\n"
    assert records(tmp_path / "l")[1]["exit_code"] == 6


def test_full_stdout_does_not_change_the_exit_code(tmp_path):
    # Our own stdout failing (here /dev/full: ENOSPC) must not cost the child's status or log.
    with open("/dev/full", "wb") as full:
        r = subprocess.run([*GPUALERT, "--log-dir", str(tmp_path / "l"), "--", sys.executable,
                            "-c", "print('x' * 100); raise SystemExit(9)"], env=ENV,
                           stdout=full, stderr=subprocess.PIPE, timeout=60)
    assert r.returncode == 9
    assert b"cannot write to fd 1: No space left on device" in r.stderr
    assert b"Traceback" not in r.stderr
    assert (tmp_path / "l" / "output.log").read_bytes() == b"x" * 100 + b"\n"
