"""Webhook channels (Slack, Mattermost, ntfy, a plain JSON POST, ...) through apprise.

apprise is imported only when a webhook is sent: mail-only sites never load it. Each send runs
in a worker thread joined with the time left, so an endpoint that never answers cannot hold a
hook past its bound; apprise's own connect/read timeouts (cto/rto) are set from the same bound.
"""

from __future__ import annotations

import logging
import threading
import time
from email import message_from_bytes, policy

from gpualert_slurm.core.config import ChannelConfig, MailConfig
from gpualert_slurm.core.termsafe import escape, one_line
from gpualert_slurm.notify.smtp import Outcome, read_secret

MAX_BODY = 3500  # Slack/Mattermost cut long posts; the full report stays in the mail/spool


def channel_url(ch: ChannelConfig) -> str:
    """The channel's apprise URL (from url_file when the URL holds a secret)."""
    if ch.url:
        return ch.url
    return read_secret(ch.url_file or "", f"notify.channels.{ch.name}.url_file")


def title_and_body(data: bytes) -> tuple[str, str]:
    """The subject and the plain-text part of a stored message."""
    msg = message_from_bytes(data, policy=policy.default)
    title = " ".join(str(msg.get("Subject", "gpualert report")).split())
    part = msg.get_body(preferencelist=("plain",)) if msg.is_multipart() else msg
    body = ""
    if part is not None:
        try:
            body = part.get_content()
        except (LookupError, KeyError, AttributeError):
            body = ""
    if not isinstance(body, str):
        body = ""
    # The report quotes the job's output: its control characters (ESC/OSC...) are posted
    # escaped, never raw (a chat client or a terminal reading the channel would act on them).
    title, body = one_line(title, 998), escape(body.replace("\r\n", "\n"))
    if len(body) > MAX_BODY:
        body = body[:MAX_BODY] + "\n[... cut: the full report is in the mail and in the spool]"
    return title, body.strip() or title


def _with_timeouts(url: str, connect_s: float, read_s: float) -> str:
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}cto={connect_s:.1f}&rto={read_s:.1f}"


def send(ch: ChannelConfig, data: bytes, mail: MailConfig, deadline: float) -> Outcome:
    """Post one message to a webhook channel; never raises."""
    left = deadline - time.monotonic()
    if left <= 0:
        return Outcome(False, "not tried: time bound reached")
    try:
        url = channel_url(ch)
    except (OSError, ValueError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        return Outcome(False, f"channel {ch.name}: {why}", permanent=True)
    try:
        import apprise
    except ImportError:
        return Outcome(False, "webhooks need the apprise package: pip install apprise "
                       "in gpualert's venv (scripts/install.sh does)", permanent=True)
    title, body = title_and_body(data)
    ap = apprise.Apprise()
    timed = _with_timeouts(url, min(mail.connect_timeout_s, left), min(mail.send_timeout_s, left))
    if not ap.add(timed):
        scheme = url.split("://", 1)[0]
        return Outcome(False, f"channel {ch.name}: apprise does not accept this URL "
                       f"(scheme {scheme}://): see apprise's list of services", permanent=True)
    result: dict[str, object] = {}

    def work() -> None:
        try:
            with apprise.LogCapture(level=logging.WARNING, fmt="%(message)s") as logs:
                result["ok"] = ap.notify(title=title, body=body,
                                         body_format=apprise.NotifyFormat.TEXT)
                result["log"] = logs.getvalue()
        except Exception as e:  # noqa: BLE001 - a plugin's bug must not reach the hook
            result["ok"] = False
            result["log"] = f"{type(e).__name__}: {e}"

    t = threading.Thread(target=work, name=f"gpualert-webhook-{ch.name}", daemon=True)
    t.start()
    t.join(max(0.0, deadline - time.monotonic()))
    if t.is_alive():
        return Outcome(False, f"channel {ch.name}: no answer within the time bound")
    if result.get("ok"):
        return Outcome(True, f"posted to channel {ch.name}")
    log = " ".join(str(result.get("log") or "").split())
    unreachable = any(w in log for w in ("Connection refused", "connection error",
                                         "Max retries exceeded", "Failed to establish"))
    return Outcome(False, f"channel {ch.name}: not accepted: {log[-400:] or 'no detail'}",
                   unreachable=unreachable)
