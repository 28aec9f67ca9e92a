"""Delivery of reports: mail and webhooks, through an outbox on disk, never raising.

    from gpualert_slurm.notify import submit, resolve_recipients, Delivery

    rcpts = resolve_recipients(opts, os.environ, cfg)   # a list; .refused lists who was not
    msg["To"] = ", ".join(rcpts)                         # allowed and why, .source where from
    msg["Subject"] = safe_header(subject)                # job names may hold CR/LF
    d = submit(msg, cfg=cfg, job_id="123")               # channels=None: the config's rule
    d.status  # sent | queued | quarantined | failed;  d.reason;  d.path (outbox file)

submit() writes the message to the outbox (cfg.outbox, default <spool>/.outbox, 0700)
atomically and fsynced, then tries to send it (notify.tries tries with backoff, each within
mail.connect_timeout_s / mail.send_timeout_s, all within notify.total_timeout_s or the
caller's timeout_s), and removes it once accepted. A transient failure (4xx, refused or lost
connection, time-out) leaves it queued for `gpualert flush`; a permanent one (5xx, no permitted
recipient, unknown channel, bad credentials file) quarantines it with its reason. "failed"
means it was not sent and the outbox could not keep it either (full, missing, unwritable):
the reason says both. Header values holding CR/LF are rewritten before anything is kept or
sent. Channels: "mail" (SMTP, recipients from To/Cc/Bcc, each checked against
mail.allow_domains) and the names in notify.channels (apprise URLs).
"""

from gpualert_slurm.notify.core import (
    STATUSES,
    ChannelResult,
    Delivery,
    FlushResult,
    OutboxSummary,
    flush,
    requeue_quarantined,
    safe_header,
    sanitise_headers,
    submit,
    summarise,
)
from gpualert_slurm.notify.recipients import Recipients, resolve_channels, resolve_recipients

__all__ = [
    "STATUSES", "ChannelResult", "Delivery", "FlushResult", "OutboxSummary", "Recipients",
    "flush", "requeue_quarantined", "resolve_channels", "resolve_recipients", "safe_header",
    "sanitise_headers", "submit", "summarise",
]
