"""General failure shapes the first held-out set exposed (chained tracebacks, failures without
a traceback, unusual exception names, library wording): each log here comes from a real Python
process that fails that way, written for these tests (not copied from any corpus case)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpualert_slurm.classify import JobFacts, TaskInput, classify
from gpualert_slurm.commands.classify import main as classify_main


def run(tmp_path: Path, code: str | None = None, *argv: str, name: str = "0.0.log",
        ) -> TaskInput:
    """Run `python -c code` (or `python *argv`); its stdout+stderr is the log."""
    log = tmp_path / name
    cmd = [sys.executable, "-c", textwrap.dedent(code)] if code is not None else [
        sys.executable, *argv]
    with open(log, "wb") as out:
        p = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=60, cwd=tmp_path)
    rc = p.returncode
    return TaskInput(str(log), rank=0, step="0", exit_code=rc if rc >= 0 else None,
                     signal=-rc if rc < 0 else None)


def verdict(t: TaskInput):
    code = t.exit_code if t.exit_code is not None else 128 + (t.signal or 0)
    assert code != 0 or t.signal is None
    return classify([t], JobFacts(exit_code=code, signal=t.signal))


# ---- chained tracebacks: the exception that ended the program decides ----

def test_chain_last_exception_decides_missing_distribution(tmp_path):
    # importlib.metadata raises PackageNotFoundError while handling StopIteration
    t = run(tmp_path, "import importlib.metadata as m; m.version('gpualert-no-such-dist-x')")
    log = Path(t.path).read_text()
    assert "During handling of the above exception" in log  # really a chain
    v = verdict(t)
    assert v.cls == "import_error", (v.cls, v.detail)
    assert "PackageNotFoundError" in v.evidence[0]["text"]
    assert "StopIteration" not in v.detail


def test_chain_generic_wrapper_keeps_specific_cause(tmp_path):
    t = run(tmp_path, """
        try:
            open('/dev/full', 'w').write('x' * 65536)
        except OSError as e:
            raise RuntimeError('saving the checkpoint failed') from e
        """)
    assert "direct cause of the following" in Path(t.path).read_text()
    v = verdict(t)
    assert v.cls == "disk_full", (v.cls, v.detail)


def test_chain_of_generic_exceptions_names_the_last(tmp_path):
    t = run(tmp_path, """
        cfg = {}
        try:
            cfg['optimizer']
        except KeyError:
            raise ValueError('config has no optimizer section')
        """)
    v = verdict(t)
    assert (v.cls, v.detail) == ("python_exception", "ValueError")
    assert v.evidence[0]["text"].startswith("ValueError")


def test_chain_connection_refused_wrapped_in_urlerror_is_storage_io(tmp_path):
    t = run(tmp_path, """
        import socket, urllib.request
        s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()
        urllib.request.urlopen(f'http://127.0.0.1:{port}/shard-00017.tar', timeout=10)
        """)
    assert "ConnectionRefusedError" in Path(t.path).read_text()
    v = verdict(t)
    assert v.cls == "storage_io", (v.cls, v.detail)
    assert "URLError" in v.evidence[0]["text"] or "urlopen" in v.evidence[0]["text"]


# ---- Python failures without a traceback ----

def test_python_dash_m_missing_module(tmp_path):
    t = run(tmp_path, None, "-m", "gpualert_no_such_pkg_q")
    log = Path(t.path).read_text()
    assert "Traceback" not in log and "ModuleNotFoundError" not in log
    assert verdict(t).cls == "import_error"


def test_python_missing_script(tmp_path):
    t = run(tmp_path, None, str(tmp_path / "no_such_train.py"))
    assert verdict(t).cls == "file_not_found"


def test_argparse_usage_error(tmp_path):
    t = run(tmp_path, """
        import argparse
        p = argparse.ArgumentParser(prog='train.py')
        p.add_argument('--lr', type=float)
        p.parse_args(['--lr', '1e-3q'])
        """)
    assert t.exit_code == 2
    v = verdict(t)
    assert (v.cls, v.detail) == ("python_exception", "argument error")
    assert "invalid float value" in v.evidence[0]["text"]


def test_argparse_missing_required_argument(tmp_path):
    t = run(tmp_path, """
        import argparse
        p = argparse.ArgumentParser(prog='finetune')
        p.add_argument('--data', required=True)
        p.parse_args([])
        """)
    v = verdict(t)
    assert (v.cls, v.detail) == ("python_exception", "argument error")


def test_plain_error_message_decides_weakly_and_not_over_a_traceback(tmp_path):
    t = run(tmp_path, "import sys; print('Error: dataset manifest lists 0 shards'); sys.exit(1)")
    v = verdict(t)
    assert v.cls == "python_exception" and v.confidence <= 0.5, (v.cls, v.confidence)
    t2 = run(tmp_path, "print('Error: retrying'); open('/no/such/dir/x.bin')", name="1.0.log")
    assert verdict(t2).cls == "file_not_found"
    t3 = run(tmp_path, "import os; print('Error: shard 3 slow, retrying', flush=True); "
                       "os.kill(os.getpid(), 9)", name="2.0.log")
    assert verdict(t3).cls == "killed"  # weak evidence yields to the signal


# ---- exception names ----

@pytest.mark.parametrize("code,detail", [
    ("import csv, io; csv.field_size_limit(8); list(csv.reader(io.StringIO('y' * 64)))",
     "_csv.Error"),
    ("import sqlite3; sqlite3.connect(':memory:').execute('select * from no_table')",
     "OperationalError"),
    ("import types; m = types.ModuleType('pkg.sub'); "
     "exec('class CustomError(Exception): pass', m.__dict__); raise m.CustomError('bad')",
     "CustomError"),
    ("next(iter([]))", "StopIteration"),
    ("raise ExceptionGroup('loaders failed', [ValueError('a'), TypeError('b')])",
     "ExceptionGroup"),
])
def test_exception_names(tmp_path, code, detail):
    v = verdict(run(tmp_path, code))
    assert (v.cls, v.detail) == ("python_exception", detail)


def test_exception_group_member_with_a_class_decides(tmp_path):
    t = run(tmp_path, "raise ExceptionGroup('shards', [ValueError('x'), "
                      "FileNotFoundError(2, 'No such file or directory', 'shard-3.bin')])")
    assert verdict(t).cls == "file_not_found"


def test_keyboard_interrupt_is_cancelled_like_but_not_on_clean_exit(tmp_path):
    t = run(tmp_path, """
        import os, signal, time
        print('epoch 1', flush=True)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
        """)
    assert "KeyboardInterrupt" in Path(t.path).read_text()
    assert verdict(t).cls == "cancelled"
    t2 = run(tmp_path, """
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            import traceback; traceback.print_exc()
        """, name="1.0.log")
    assert t2.exit_code == 0
    assert classify([t2], JobFacts(exit_code=0)).cls == "success"


# ---- library wording ----

def test_sqlite_full_is_disk_full(tmp_path):
    t = run(tmp_path, """
        import sqlite3
        c = sqlite3.connect(':memory:'); c.execute('pragma max_page_count=3')
        c.execute('create table t(x)')
        for _ in range(50):
            c.execute('insert into t values (?)', ('x' * 4000,))
        """)
    assert "database or disk is full" in Path(t.path).read_text()
    assert verdict(t).cls == "disk_full"


def test_sqlite_readonly_is_permission_denied(tmp_path):
    db = tmp_path / "runs.db"
    sqlite3.connect(db).execute("create table t(x)").connection.commit()
    t = run(tmp_path, f"""
        import sqlite3
        c = sqlite3.connect('file:{db}?mode=ro', uri=True)
        c.execute('insert into t values (1)')
        """)
    assert "readonly database" in Path(t.path).read_text()
    assert verdict(t).cls == "permission_denied"


def test_sqlite_cannot_open_is_file_not_found_with_low_confidence(tmp_path):
    t = run(tmp_path, "import sqlite3; sqlite3.connect('/no/such/dir/metrics.db')")
    v = verdict(t)
    assert v.cls == "file_not_found" and v.confidence <= 0.6, (v.cls, v.confidence)


@pytest.mark.parametrize("code,expected", [
    ("import errno, os; raise OSError(errno.EROFS, os.strerror(errno.EROFS), '/datasets/out')",
     "permission_denied"),
    ("import errno, os; raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), '/home/u/ck')",
     "disk_full"),
    # another language's wording of ENOSPC (Go's os.PathError), no traceback
    ("import sys; print('write /scratch/ckpt/step_900.bin: no space left on device'); "
     "sys.exit(1)", "disk_full"),
])
def test_errno_wordings(tmp_path, code, expected):
    assert verdict(run(tmp_path, code)).cls == expected


def test_iostream_error_alone_is_weak_disk_full(tmp_path):
    t = run(tmp_path, "import sys; print('saving: basic_ios::clear: iostream error', "
                      "file=sys.stderr); sys.exit(1)")
    v = verdict(t)
    assert v.cls == "disk_full" and v.confidence <= 0.5, (v.cls, v.confidence)


SERVER = """
    import socket, threading, urllib.request
    s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()
    def serve():
        c, _ = s.accept(); c.recv(4096)
        {reply}
        c.close()
    threading.Thread(target=serve, daemon=True).start()
    r = urllib.request.urlopen(f'http://127.0.0.1:{{s.getsockname()[1]}}/shard.tar', timeout=20)
    r.read()
    """


@pytest.mark.parametrize("reply,word", [
    ("pass", "RemoteDisconnected"),
    ("c.sendall(b'HTTP/1.0 200 OK\\r\\nContent-Length: 5000\\r\\n\\r\\nabc')", "IncompleteRead"),
])
def test_broken_data_server_is_storage_io(tmp_path, reply, word):
    t = run(tmp_path, SERVER.format(reply=reply))
    assert word in Path(t.path).read_text()
    v = verdict(t)
    assert v.cls == "storage_io", (v.cls, v.detail)


# ---- `gpualert classify` fills the exit facts from the records ----

def test_cli_uses_sibling_exit_record(tmp_path, capsys):
    t = run(tmp_path, "print('step 3 done')\nimport sys; sys.exit(3)", name="run.0.log")
    (tmp_path / "run.0.exit").write_text(json.dumps(
        {"node": "n1", "step": "run", "rank": 0, "exit_code": t.exit_code, "signal": None,
         "core_dumped": False, "end_time": 1.0}))
    assert classify_main(["--json", t.path]) == 0
    v = json.loads(capsys.readouterr().out)
    assert "no exit status given" not in v["detail"]
    assert "exit code 3" in v["detail"] and v["root_node"] is None


def test_cli_uses_gpualert_run_log_dir(tmp_path, capsys):
    d = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "gpualert_slurm", "run", "--log-dir", str(d), "--",
                        sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"],
                       capture_output=True, timeout=60, env={**os.environ})
    assert (d / "exit.json").exists(), p.stderr
    assert classify_main(["--json", str(d / "output.log")]) == 0
    v = json.loads(capsys.readouterr().out)
    assert v["class"] == "killed", v


@pytest.mark.parametrize("status,expected", [(503, "storage_io"), (404, "file_not_found")])
def test_http_status_of_a_data_server(tmp_path, status, expected):
    reply = f"c.sendall(b'HTTP/1.0 {status} X\\r\\nContent-Length: 0\\r\\n\\r\\n')"
    t = run(tmp_path, SERVER.format(reply=reply))
    assert f"HTTP Error {status}" in Path(t.path).read_text()
    assert verdict(t).cls == expected


def test_shell_command_not_found(tmp_path):
    log = tmp_path / "0.0.log"
    with open(log, "wb") as out:
        p = subprocess.run(["bash", "-c", "echo start; gpualert-no-such-launcher --nproc 2"],
                           stdout=out, stderr=subprocess.STDOUT, timeout=30)
    assert p.returncode == 127
    t = TaskInput(str(log), rank=0, step="0", exit_code=127)
    assert verdict(t).cls == "file_not_found"
