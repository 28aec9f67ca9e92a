"""One bounded SMTP send: connect timeout, a per-command timeout, and a hard deadline after
which the socket is shut whatever the relay does (a relay that drips one byte at a time
cannot hold a hook past its bound)."""

from __future__ import annotations

import contextlib
import functools
import os
import smtplib
import socket
import ssl
import stat
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpualert_slurm.core.config import MailConfig

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer  # what smtplib.SMTP.send takes (typeshed only)


@dataclass
class Outcome:
    """What one try gave. `permanent`: trying again cannot help (5xx, bad config);
    `unreachable`: the relay (or endpoint) could not be reached at all."""

    ok: bool
    reason: str = ""
    permanent: bool = False
    unreachable: bool = False
    refused: dict[str, str] = field(default_factory=dict)  # recipient -> relay's answer


class _Deadline(smtplib.SMTP):
    """Per-command timeouts clipped to what is left of the overall bound."""

    deadline: float = 0.0
    op_timeout: float = 10.0
    _host: str  # smtplib's own (set in __init__): the TLS server's name

    def _clip(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("time bound reached")
        sock = getattr(self, "sock", None)
        if sock is not None:
            sock.settimeout(min(self.op_timeout, left))

    def send(self, s: ReadableBuffer | str) -> None:
        self._clip()
        super().send(s)

    def getreply(self) -> tuple[int, bytes]:
        self._clip()
        return super().getreply()


class _SMTP(_Deadline):
    pass


class _SMTPS(_Deadline, smtplib.SMTP_SSL):
    pass


def read_secret(path: str, what: str) -> str:
    """A secret from a root-only file; ValueError saying what to fix otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{what} {path}: not a regular file")
        if st.st_uid not in (0, os.geteuid()):
            raise ValueError(f"{what} {path}: owned by uid {st.st_uid}: chown it to root")
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise ValueError(f"{what} {path}: mode {stat.S_IMODE(st.st_mode):04o} lets others "
                             "read it: chmod 600 it")
        data = os.read(fd, 65536)
    finally:
        os.close(fd)
    text = data.decode("utf-8").strip()
    if not text:
        raise ValueError(f"{what} {path}: empty")
    return text


@functools.lru_cache(maxsize=4)
def _tls_context(ca_file: str | None) -> ssl.SSLContext:
    """Built once per CA file: loading CA certificates costs tens of ms."""
    return ssl.create_default_context(cafile=ca_file)


def _text(text: bytes | str) -> str:
    msg = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
    return " ".join(msg.split())


def _code_outcome(code: int, text: bytes | str, stage: str) -> Outcome:
    reason = f"relay refused at {stage}: {code} {_text(text)}"[:500]
    return Outcome(False, reason, permanent=code >= 500)


def send(data: bytes, sender: str, recipients: list[str], mail: MailConfig,
         deadline: float) -> Outcome:
    """Send one message; never raises. `deadline` is a time.monotonic() value."""
    start = time.monotonic()
    out = _send(data, sender, recipients, mail, deadline)
    if not out.ok and not out.permanent and time.monotonic() >= deadline - 0.05:
        out.reason = (f"relay {mail.relay}: no complete answer within the time bound "
                      f"({deadline - start:.1f} s): {out.reason}")
    return out


def _send(data: bytes, sender: str, recipients: list[str], mail: MailConfig,
          deadline: float) -> Outcome:
    left = deadline - time.monotonic()
    if left <= 0:
        return Outcome(False, "not tried: time bound reached")
    password = None
    if mail.username:
        try:
            password = read_secret(mail.password_file or "", "mail.password_file")
        except (OSError, ValueError, UnicodeDecodeError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            return Outcome(False, f"SMTP password: {why}", permanent=True)
    host, port = mail.relay_host, mail.relay_port
    where = f"relay {host}:{port}"
    try:
        ctx = _tls_context(mail.ca_file) if mail.tls != "none" else None
    except (OSError, ssl.SSLError) as e:
        return Outcome(False, f"mail.ca_file {mail.ca_file}: cannot load: {e}", permanent=True)
    connect_s = min(mail.connect_timeout_s, left)
    client: _Deadline = (_SMTPS(timeout=connect_s, context=ctx) if mail.tls == "ssl"
                         else _SMTP(timeout=connect_s))
    client.deadline = deadline
    client.op_timeout = mail.send_timeout_s
    # smtplib names the TLS server (SNI, certificate check) from the host given to __init__,
    # not to connect(); we connect later, under our own bounds.
    client._host = host

    def cut() -> None:  # the hard bound: unblocks any read or write in progress
        sock = getattr(client, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(left, cut)
    timer.daemon = True
    timer.start()
    stage = "connect"
    try:
        try:
            code, greeting = client.connect(host, port)
        except smtplib.SMTPConnectError as e:
            return _code_outcome(e.smtp_code, e.smtp_error, "connect")
        except ssl.SSLCertVerificationError as e:  # tls: ssl; a config matter, not an outage
            return Outcome(False, f"{where}: TLS certificate not trusted: {e.verify_message} "
                           "(set mail.ca_file to the CA that signed it)", permanent=True)
        except (OSError, smtplib.SMTPServerDisconnected) as e:
            return Outcome(False, f"{where}: cannot connect: {_os_reason(e, mail)}",
                           unreachable=True)
        if code != 220:  # connect() returns the greeting; only __init__ would check it
            # RFC 5321 3.1: 554 instead of 220 refuses this client (permanent), 421 is "not
            # now"; either way the relay now answers only QUIT, so EHLO would hide the reason
            with contextlib.suppress(OSError, smtplib.SMTPException):
                client.quit()
            if code == -1:  # smtplib's "no parsable reply": the relay closed or spoke garbage
                return Outcome(False, f"{where}: no SMTP greeting: {_text(greeting)}")
            return _code_outcome(code, greeting, "greeting")
        stage = "EHLO"
        client.ehlo_or_helo_if_needed()
        if mail.tls == "starttls":
            stage = "STARTTLS"
            try:
                client.starttls(context=ctx)
            except smtplib.SMTPNotSupportedError:
                return Outcome(False, f"{where} does not offer STARTTLS (mail.tls: starttls): "
                               "use tls: none or ssl, or another relay", permanent=True)
            client.ehlo()
        if mail.username:
            stage = "AUTH"
            client.login(mail.username, password or "")
        stage = "MAIL"
        refused = client.sendmail(sender, recipients, data)
        with_refused = {r: f"{c} {m.decode('utf-8', 'replace')}"
                        for r, (c, m) in refused.items()}
        with contextlib.suppress(OSError, smtplib.SMTPException):
            client.quit()  # accepted is accepted, whatever QUIT gives
        reason = f"accepted by {where}"
        if with_refused:
            reason += "; refused: " + "; ".join(f"{r} ({m})" for r, m in with_refused.items())
        return Outcome(True, reason, refused=with_refused)
    except smtplib.SMTPRecipientsRefused as e:
        answers = {r: (c, m) for r, (c, m) in e.recipients.items()}
        transient = any(c < 500 for c, _ in answers.values())
        text = "; ".join(f"{r}: {c} {m.decode('utf-8', 'replace')}" for r, (c, m) in
                         answers.items())
        return Outcome(False, f"{where} refused every recipient: {text}"[:500],
                       permanent=not transient,
                       refused={r: f"{c} {m.decode('utf-8', 'replace')}"
                                for r, (c, m) in answers.items()})
    except smtplib.SMTPResponseException as e:
        return _code_outcome(e.smtp_code, e.smtp_error, stage)
    except ssl.SSLCertVerificationError as e:
        return Outcome(False, f"{where}: TLS certificate not trusted at {stage}: "
                       f"{e.verify_message} (set mail.ca_file to the CA that signed it)",
                       permanent=True)
    except smtplib.SMTPServerDisconnected as e:
        return Outcome(False, f"{where}: connection lost at {stage}: {e}")
    except (OSError, smtplib.SMTPException, ValueError) as e:
        return Outcome(False, f"{where}: {stage}: {_os_reason(e, mail)}")
    finally:
        timer.cancel()
        with contextlib.suppress(OSError):
            client.close()


def _os_reason(e: BaseException, mail: MailConfig) -> str:
    if isinstance(e, TimeoutError | socket.timeout):
        return "no answer within the time bound"
    if isinstance(e, ConnectionRefusedError):
        return "connection refused (is the relay running?)"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__
