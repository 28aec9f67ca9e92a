"""Real servers on 127.0.0.1 for the delivery tests: an SMTP relay that answers with a chosen
code, a TCP listener that never speaks, one that drips a byte at a time, an HTTP receiver that
records what webhooks post, and a small tmpfs for a full or read-only outbox."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller

from gpualert_slurm.core.config import Config, parse_config


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_cfg(spool: Path, port: int, **extra: Any) -> Config:
    """A config whose relay is 127.0.0.1:port and whose spool is `spool` (root 0755)."""
    spool.mkdir(parents=True, exist_ok=True)
    if spool.stat().st_mode & 0o777 != 0o755:
        os.chmod(spool, 0o755)
    mail = {"relay": f"127.0.0.1:{port}", "from": "gpualert@cluster.example.org",
            "domain": "lab.example.org", "connect_timeout_s": 2, "send_timeout_s": 2}
    mail.update(extra.pop("mail", {}))
    notify = {"total_timeout_s": 4, "tries": 2, "backoff_s": 0.2}
    notify.update(extra.pop("notify", {}))
    doc = {"spool": str(spool), "mail": mail, "notify": notify, **extra}
    return parse_config(doc, str(spool / "gpualert.yaml"))


def report(subject: str = "[gpualert] FAILED job 12 (train)", to: str = "alice@lab.example.org",
           body: str = "CUDA out of memory on n2, rank 5\n") -> EmailMessage:
    msg = EmailMessage()
    msg["Subject"] = subject
    msg["From"] = "gpualert@cluster.example.org"
    msg["To"] = to
    msg.set_content(body)
    msg.add_alternative(f"<html><body><p>{body}</p></body></html>", subtype="html")
    return msg


class CodeHandler:
    """aiosmtpd handler: answers RCPT (or DATA) with `code`, or accepts and keeps the message."""

    def __init__(self) -> None:
        self.rcpt_reply: str | None = None
        self.data_reply: str | None = None
        self.received: list[tuple[str, list[str], bytes]] = []

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str,
                          rcpt_options: list[str]) -> str:
        if self.rcpt_reply:
            return self.rcpt_reply
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.data_reply:
            return self.data_reply
        self.received.append((envelope.mail_from, list(envelope.rcpt_tos),
                               bytes(envelope.original_content or b"")))
        return "250 Message accepted for delivery"


@contextlib.contextmanager
def code_relay(port: int | None = None, **kwargs: Any) -> Iterator[tuple[CodeHandler, int]]:
    handler = CodeHandler()
    port = port or free_port()
    ctl = Controller(handler, hostname="127.0.0.1", port=port, ready_timeout=10, **kwargs)
    ctl.start()
    try:
        yield handler, port
    finally:
        ctl.stop()


def make_certs(where: Path) -> tuple[Path, ssl.SSLContext]:
    """A throw-away CA and a server certificate for 127.0.0.1 (openssl): returns the CA file
    a client must trust, and a server-side SSL context."""
    where.mkdir(parents=True, exist_ok=True)
    ca, ca_key = where / "ca.pem", where / "ca.key"
    srv, srv_key, csr = where / "srv.pem", where / "srv.key", where / "srv.csr"
    ext = where / "ext.cnf"
    ext.write_text("basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, text=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out",
        str(ca), "-days", "2", "-subj", "/CN=gpualert-test-ca")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(srv_key), "-out", str(csr),
        "-subj", "/CN=127.0.0.1")
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-out", str(srv), "-days", "2", "-extfile", str(ext))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(srv), str(srv_key))
    return ca, ctx


@contextlib.contextmanager
def silent_listener() -> Iterator[int]:
    """Accepts TCP (the kernel completes the handshake) and never says a word."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    try:
        yield int(s.getsockname()[1])
    finally:
        s.close()


@contextlib.contextmanager
def _serving(serve: Callable[[socket.socket, threading.Event], None]) -> Iterator[int]:
    """A listener on a free port whose connections `serve(srv, stop)` handles in a thread."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.settimeout(0.2)
    stop = threading.Event()
    t = threading.Thread(target=serve, args=(srv, stop), daemon=True)
    t.start()
    try:
        yield int(srv.getsockname()[1])
    finally:
        stop.set()
        t.join(5)
        srv.close()


def greet_and_hang_up(line: bytes) -> contextlib.AbstractContextManager[int]:
    """Answers each connection with one greeting line and closes it, as a relay refusing a
    client outright does (no wait for QUIT)."""
    def serve(srv: socket.socket, stop: threading.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                c, _ = srv.accept()
                with c:
                    c.sendall(line + b"\r\n")

    return _serving(serve)


def drip_listener(interval: float = 0.3) -> contextlib.AbstractContextManager[int]:
    """Accepts and sends '2', '2', '0', ' ' ... one byte every `interval` s, never a newline:
    each read returns in time, so only a hard deadline ends the conversation."""
    def serve(srv: socket.socket, stop: threading.Event) -> None:
        conns = []
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                c, _ = srv.accept()
                conns.append(c)
            for c in list(conns):
                try:
                    c.send(b"2")
                except OSError:
                    conns.remove(c)
            time.sleep(interval)
        for c in conns:
            c.close()

    return _serving(serve)


class HookReceiver:
    """A local HTTP server recording every request: .requests = [(method, path, headers,
    body bytes)]. `status` is what it answers; `delay` how long it waits first."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.status = 200
        self.delay = 0.0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                outer.requests.append((self.command, self.path, dict(self.headers), body))
                if outer.delay:
                    time.sleep(outer.delay)
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/json")
                payload = json.dumps({"ok": outer.status < 300}).encode()
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HookReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str = "256k", options: str = "") -> Iterator[Path]:
    """A tmpfs mounted at `path` (as root), unmounted afterwards whatever happens."""
    path.mkdir(parents=True, exist_ok=True)
    opts = f"size={size},mode=0755" + (f",{options}" if options else "")
    subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "gpualert-test", str(path)],
                   check=True, capture_output=True, text=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(path: Path) -> None:
    """Fill the filesystem holding `path` until ENOSPC."""
    fd = os.open(path / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"x" * 4096)
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)
