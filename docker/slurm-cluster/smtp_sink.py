"""A real SMTP server that keeps every message it receives as one file in a directory.

Used by the test cluster (`cluster up` runs it on 127.0.0.1:8025) and by tests that want their
own sink on a free port:

    python smtp_sink.py --host 127.0.0.1 --port 8025 --maildir /var/lib/gpualert-cluster/mail

or, from Python, ``SmtpSink(maildir, port=0).start()`` (``.port`` then says where it listens).
Each message is written to ``<maildir>/.tmp-<name>`` and renamed to ``<name>.eml``, so a reader
never sees half a message.
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import sys
import threading
import time
from email.utils import formatdate
from pathlib import Path

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

_counter = itertools.count(1)
_counter_lock = threading.Lock()


class MaildirHandler:
    """aiosmtpd handler: one file per accepted message, atomically."""

    def __init__(self, maildir: str | os.PathLike[str]) -> None:
        self.maildir = Path(maildir)
        self.maildir.mkdir(parents=True, exist_ok=True)

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        with _counter_lock:
            seq = next(_counter)
        name = f"{time.time_ns()}.{os.getpid()}.{seq}"
        data = envelope.original_content or envelope.content or b""
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogateescape")
        # Envelope facts go in front as headers a reader can use without parsing SMTP logs.
        head = (
            f"X-Sink-Mail-From: {envelope.mail_from}\r\n"
            f"X-Sink-Rcpt-To: {', '.join(envelope.rcpt_tos)}\r\n"
            f"X-Sink-Received: {formatdate(localtime=False)}\r\n"
        ).encode()
        tmp = self.maildir / f".tmp-{name}"
        final = self.maildir / f"{name}.eml"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(head + data)
            while view:  # os.write may write less than asked; a cut message must not be kept
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, final)
        return "250 Message accepted for delivery"


class SmtpSink:
    """An SMTP sink running in a background thread; port 0 picks a free port."""

    def __init__(self, maildir: str | os.PathLike[str], host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.maildir = Path(maildir)
        self.host = host
        self._requested_port = port
        self.port = port
        self._controller: Controller | None = None

    def start(self) -> SmtpSink:
        port = self._requested_port or _free_port(self.host)
        self._controller = Controller(MaildirHandler(self.maildir), hostname=self.host,
                                      port=port, ready_timeout=10)
        self._controller.start()
        self.port = port
        return self

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    def messages(self) -> list[Path]:
        """Stored messages, oldest first."""
        return sorted(self.maildir.glob("*.eml"), key=lambda p: p.name)

    def __enter__(self) -> SmtpSink:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _free_port(host: str) -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8025)
    ap.add_argument("--maildir", required=True, help="directory that receives one file a message")
    ap.add_argument("--pid-file", help="write the server's pid here once it listens")
    args = ap.parse_args(argv)
    if not 0 < args.port < 65536:
        print(f"smtp_sink: bad port {args.port}", file=sys.stderr)
        return 2
    try:
        sink = SmtpSink(args.maildir, args.host, args.port).start()
    except OSError as e:
        print(f"smtp_sink: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
    if args.pid_file:
        Path(args.pid_file).write_text(f"{os.getpid()}\n")
    print(f"smtp_sink: listening on {args.host}:{sink.port}, maildir {args.maildir}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    sink.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
