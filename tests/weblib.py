"""What the web tests share: a second unprivileged user, the app served as a user by
`gpualert web` or by Phusion Passenger (Debian's `passenger`, through ood/gpualert's
passenger_wsgi.py), plain HTTP requests, and headless Chromium (Debian's `chromium`)."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GPUALERT = "/opt/gpualert/venv/bin/gpualert"
VENV_PYTHON = "/opt/gpualert/venv/bin/python3"
OTHER_USER = "gpatest2"  # user B: scripts/install-test-deps.sh makes it, as it makes gpatest
TOKENS: dict[str, str] = {}  # a `gpualert web` base URL -> the token it printed


def ensure_user(name: str) -> pwd.struct_passwd:
    """An unprivileged user with a home (made here if missing, as install-test-deps.sh does)."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", "--user-group",
                        name], check=True)
        return pwd.getpwnam(name)


def shared_dir(prefix: str) -> Path:
    """A fresh directory every user may enter (tmp_path's parents are root's 0700)."""
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    d.chmod(0o755)
    return d


def _env(user: str, extra: dict[str, str]) -> list[str]:
    pw = pwd.getpwnam(user)
    base = {"HOME": pw.pw_dir, "USER": user, "LOGNAME": user, "LANG": "C.UTF-8",
            "PATH": "/usr/local/bin:/usr/bin:/bin", **extra}
    return ["runuser", "-u", user, "--", "env", "-i", *(f"{k}={v}" for k, v in base.items())]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def gpualert_web(user: str, config: Path) -> Iterator[str]:
    """`gpualert web` as `user`; yields its base URL (the line it prints)."""
    m = None
    proc = subprocess.Popen(_env(user, {"GPUALERT_CONFIG": str(config)}) + [GPUALERT, "web"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        line = proc.stdout.readline()
        m = re.search(r"(http://127\.0\.0\.1:\d+)/\?token=([A-Za-z0-9_-]+) ", line)
        assert m, f"gpualert web printed {line!r}; stderr: {proc.stderr.read()[-2000:]}"
        TOKENS[m.group(1)] = m.group(2)
        yield m.group(1)
    finally:
        TOKENS.pop(m.group(1) if m else "", None)
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


@contextmanager
def passenger(user: str, config: Path) -> Iterator[str]:
    """The OnDemand app dir (ood/gpualert) served by Passenger standalone (its builtin engine,
    Debian's PassengerAgent) as `user`, with the venv's Python; yields its base URL."""
    exe = shutil.which("passenger")
    assert exe, "Debian's passenger package is missing: run scripts/install-test-deps.sh"
    work = shared_dir("gpualert-passenger-")
    app = work / "gpualert"
    shutil.copytree(REPO / "ood" / "gpualert", app)
    pw = pwd.getpwnam(user)
    for p in (work, app, *app.iterdir()):
        os.chown(p, pw.pw_uid, pw.pw_gid)
    port = free_port()
    pid = work / "passenger.pid"
    cmd = _env(user, {"GPUALERT_CONFIG": str(config), "TMPDIR": str(work)}) + [
        exe, "start", "--engine", "builtin", "--app-type", "wsgi",
        "--startup-file", "passenger_wsgi.py", "--address", "127.0.0.1", "--port", str(port),
        "--python", VENV_PYTHON, "--log-file", str(work / "passenger.log"),
        "--pid-file", str(pid), "--environment", "production", "--daemonize",
        "--min-instances", "1", "--max-pool-size", "2"]
    r = subprocess.run(cmd, cwd=app, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        subprocess.run(_env(user, {"TMPDIR": str(work)}) + [
            exe, "stop", "--pid-file", str(pid), "--port", str(port)],
            cwd=app, capture_output=True, timeout=60)
        shutil.rmtree(work, ignore_errors=True)



def _token(url: str) -> str | None:
    return next((t for base, t in TOKENS.items() if url.startswith(base + "/")), None)


def with_token(url: str) -> str:
    """The URL as the user opens it: with `gpualert web`'s token (a browser then keeps the
    cookie the app sets); Passenger's as it is."""
    t = _token(url)
    return url if t is None else url + ("&" if "?" in url else "?") + f"token={t}"


def get(url: str, timeout: float = 30, token: bool = True) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of a GET, 4xx/5xx included, with `gpualert web`'s cookie
    unless token=False."""
    req = urllib.request.Request(url)
    if token and _token(url):
        req.add_header("Cookie", f"gpualert_token={_token(url)}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def raw_get(base: str, path: str, timeout: float = 30) -> tuple[int, bytes]:
    """A GET with the path sent exactly as given (urllib would not send `..` unchanged)."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        t = TOKENS.get(base)
        cookie = f"Cookie: gpualert_token={t}\r\n" if t else ""
        s.sendall(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n{cookie}\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data.partition(b"\r\n\r\n")[2]


def wait_up(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            get(url, timeout=5)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def chromium() -> str:
    exe = shutil.which("chromium")
    assert exe, "Debian's chromium package is missing: run scripts/install.sh"
    return exe


def chromium_dom(url: str) -> str:
    """The page's DOM once headless Chromium has loaded it."""
    r = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                        "--dump-dom", with_token(url)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def chromium_shot(url: str, out: Path, size: str = "1100,1300") -> bytes:
    """A PNG of the page as headless Chromium draws it."""
    r = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", f"--window-size={size}", f"--screenshot={out}",
                        with_token(url)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and out.exists(), r.stderr[-2000:]
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 20_000, len(data)  # something was drawn
    return data
