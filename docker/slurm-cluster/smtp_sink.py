"""A real SMTP server that keeps every message it receives as one file in a directory.

Used by the test cluster (`cluster up` runs it on 127.0.0.1:8025) and by tests that want their
own sink on a free port:

    python smtp_sink.py --host 127.0.0.1 --port 8025 --maildir /var/lib/gpualert-cluster/mail

or, from Python, ``SmtpSink(maildir, port=0).start()`` (``.port`` then says where it listens).
``greeting=`` (``--greeting``, or ``.greeting`` between connections) makes it answer each new
connection with that line instead of 220, as a relay refusing a client does (RFC 5321 3.1:
554 or 421); it then answers every command but QUIT with 503 and keeps nothing.
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


_BAD_SEQUENCE = "503 5.5.1 Bad sequence of commands (refused at the greeting: send QUIT)"


class _GreetingSMTP(SMTP):
    """aiosmtpd's server, greeting with `greeting` instead of its 220 line when one is set."""

    def __init__(self, *args: object, greeting: str | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.greeting = greeting
        self._greeted = False

    async def push(self, status: str | bytes) -> None:
        if not self._greeted:  # the first line this connection sends is the greeting
            self._greeted = True
            if self.greeting and str(status).startswith("220"):
                status = self.greeting
        await super().push(status)


class MaildirHandler:
    """aiosmtpd handler: one file per accepted message, atomically."""

    def __init__(self, maildir: str | os.PathLike[str]) -> None:
        self.maildir = Path(maildir)
        self.maildir.mkdir(parents=True, exist_ok=True)

    # After a refusing greeting, RFC 5321 3.1: 503 to everything but QUIT.
    async def handle_HELO(self, server: SMTP, session: Session, envelope: Envelope,
                          hostname: str) -> str:
        if getattr(server, "greeting", None):
            return _BAD_SEQUENCE
        session.host_name = hostname
        return f"250 {server.hostname}"

    async def handle_EHLO(self, server: SMTP, session: Session, envelope: Envelope,
                          hostname: str, responses: list[str]) -> list[str]:
        if getattr(server, "greeting", None):
            return [_BAD_SEQUENCE]
        session.host_name = hostname
        return responses

    async def handle_MAIL(self, server: SMTP, session: Session, envelope: Envelope,
                          address: str, mail_options: list[str]) -> str:
        if getattr(server, "greeting", None):
            return _BAD_SEQUENCE
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        if getattr(server, "greeting", None):
            return _BAD_SEQUENCE
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
                 port: int = 0, greeting: str | None = None) -> None:
        self.maildir = Path(maildir)
        self.host = host
        self._requested_port = port
        self.port = port
        self.greeting = greeting  # read at each new connection
        self._controller: Controller | None = None

    def start(self) -> SmtpSink:
        port = self._requested_port or _free_port(self.host)
        sink = self

        class _Controller(Controller):
            def factory(self) -> SMTP:
                return _GreetingSMTP(self.handler, greeting=sink.greeting, **self.SMTP_kwargs)

        self._controller = _Controller(MaildirHandler(self.maildir), hostname=self.host,
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
    ap.add_argument("--greeting", help="greet with this line instead of 220 (e.g. '554 5.7.1 "
                    "no service'): a relay that refuses every client")
    args = ap.parse_args(argv)
    if not 0 < args.port < 65536:
        print(f"smtp_sink: bad port {args.port}", file=sys.stderr)
        return 2
    if args.greeting is not None and not (args.greeting[:3].isdigit()
                                          and args.greeting[3:4] in ("", " ")):
        print(f"smtp_sink: bad --greeting {args.greeting!r}: expected 'CODE text', e.g. "
              "'554 5.7.1 no service'", file=sys.stderr)
        return 2
    try:
        sink = SmtpSink(args.maildir, args.host, args.port, args.greeting).start()
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
