"""A message as the channels send it: header values made safe, the bytes for SMTP, its
recipients."""

from __future__ import annotations

import email.message
import re
from email import policy
from email.utils import getaddresses

# Folding at 78 makes Python start long headers with an empty first line ("Subject:\r\n
# text"), which some readers show with a leading space; RFC 5322's hard limit is 998.
SMTP_POLICY = policy.SMTP.clone(max_line_length=998)
_CRLF = re.compile(r"[\r\n]+[ \t]*")


def safe_header(text: str, limit: int = 200) -> str:
    """A one-line header value from user-controlled text (job name, comment, paths): CR/LF
    and other control characters become spaces, long values are cut."""
    text = _CRLF.sub(" ", str(text))
    text = "".join(c if c >= " " and c != "\x7f" else " " for c in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def as_bytes(msg: email.message.Message) -> bytes:
    """Serialise for SMTP (CRLF line ends); Bcc is never transmitted. (Taken out and put
    back rather than copying the message: a deep copy of a report costs more than sending.)"""
    hidden = [(k, msg.get_all(k)) for k in ("Bcc", "Resent-Bcc") if k in msg]
    for k, _ in hidden:
        del msg[k]
    try:
        return msg.as_bytes(policy=SMTP_POLICY)
    finally:
        for k, values in hidden:
            for v in values or ():
                msg[k] = v


def recipients_of(msg: email.message.Message) -> list[str]:
    values = [str(v) for key in ("To", "Cc", "Bcc") for v in msg.get_all(key, [])]
    return [addr for _, addr in getaddresses(values) if addr]
