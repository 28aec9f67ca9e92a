"""The channels a message goes out on, behind one protocol: `prepare` (what is kept in the
outbox and sent, and why it can never be sent), `send` (one bounded try, never raising) and
`adopt` (an outbox message found without its state). "mail" is built in; every other name
is a webhook of notify.channels (apprise). A new kind of channel is a class with these three
methods, registered in BUILTIN under its name (docs/MAP.md: "add a notification channel")."""

from __future__ import annotations

import email.message
from collections.abc import Callable, Mapping
from email import policy
from typing import Any, Protocol, runtime_checkable

from gpualert_slurm.core.config import Config
from gpualert_slurm.core.vocab import MAIL_CHANNEL
from gpualert_slurm.notify import smtp, webhook
from gpualert_slurm.notify.message import SMTP_POLICY, as_bytes, recipients_of, safe_header
from gpualert_slurm.notify.recipients import check_addresses, envelope_sender
from gpualert_slurm.notify.smtp import Outcome


@runtime_checkable
class Channel(Protocol):
    """One way a report reaches people. `state` is the outbox entry's JSON state (the
    channel's name, the envelope, its attempts): a channel reads and adds its own keys."""

    def prepare(self, cfg: Config, msg: email.message.Message, state: dict[str, Any]
                ) -> tuple[bytes, str | None]:
        """The bytes to keep and send, and a permanent reason it cannot be sent (None: it
        can); fills what send() needs into `state`."""
        ...

    def send(self, cfg: Config, state: dict[str, Any], data: bytes, deadline: float
             ) -> Outcome:
        """One try within `deadline` (time.monotonic()); never raises."""
        ...

    def adopt(self, cfg: Config, read: Callable[[], bytes], state: dict[str, Any]
              ) -> str | None:
        """Rebuild `state` for a kept message whose state was lost (a crash; `read` gives
        its bytes); a reason to quarantine it, or None."""
        ...


def _unknown(cfg: Config, name: str) -> str:
    return f"channel {name} is not in notify.channels of {cfg.path or 'the config'}"


class MailChannel:
    """SMTP through mail.relay; recipients from To/Cc/Bcc, each checked (mail.allow_domains,
    mail.recipients)."""

    def prepare(self, cfg: Config, msg: email.message.Message, state: dict[str, Any]
                ) -> tuple[bytes, str | None]:
        data = as_bytes(msg)
        allowed, refused = check_addresses(recipients_of(msg), cfg)
        state.update(sender=envelope_sender(cfg), recipients=allowed,
                     refused=[f"{a}: {why}" for a, why in refused])
        if allowed:
            return data, None
        return data, "no permitted recipient" + (
            ": " + "; ".join(state["refused"]) if refused else " (no To/Cc/Bcc address)")

    def send(self, cfg: Config, state: dict[str, Any], data: bytes, deadline: float
             ) -> Outcome:
        return smtp.send(data, state["sender"], list(state["recipients"]), cfg.mail, deadline)

    def adopt(self, cfg: Config, read: Callable[[], bytes], state: dict[str, Any]
              ) -> str | None:
        msg = email.message_from_bytes(read(), policy=policy.SMTP)
        allowed, refused = check_addresses(recipients_of(msg), cfg)
        state.update(recipients=allowed, refused=[f"{a}: {w}" for a, w in refused],
                     subject=safe_header(str(msg.get("Subject", "")), 200))
        return None if allowed else "orphan without a permitted recipient"


class WebhookChannel:
    """A named channel of notify.channels: the subject and the plain text, posted through
    apprise (notify/webhook.py)."""

    def prepare(self, cfg: Config, msg: email.message.Message, state: dict[str, Any]
                ) -> tuple[bytes, str | None]:
        # what a webhook needs: the subject and the plain text, not the attachments
        title, body = webhook.title_and_body(msg.as_bytes(policy=SMTP_POLICY))
        small = email.message.EmailMessage()
        small["Subject"] = safe_header(title, 998)
        small.set_content(body)
        name = str(state["channel"])
        return (small.as_bytes(policy=SMTP_POLICY),
                _unknown(cfg, name) if cfg.notify.channel(name) is None else None)

    def send(self, cfg: Config, state: dict[str, Any], data: bytes, deadline: float
             ) -> Outcome:
        ch = cfg.notify.channel(str(state["channel"]))
        if ch is None:
            return Outcome(False, _unknown(cfg, str(state["channel"])), permanent=True)
        return webhook.send(ch, data, cfg.mail, deadline)

    def adopt(self, cfg: Config, read: Callable[[], bytes], state: dict[str, Any]
              ) -> str | None:
        return None  # a webhook's message names no recipient: nothing to recover


BUILTIN: Mapping[str, Channel] = {MAIL_CHANNEL: MailChannel()}
WEBHOOK: Channel = WebhookChannel()


def channel(name: str) -> Channel:
    """The channel that carries messages for `name` (a built-in, else a webhook of
    notify.channels)."""
    return BUILTIN.get(name, WEBHOOK)
