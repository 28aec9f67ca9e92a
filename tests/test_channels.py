"""The notification channels behind one protocol (notify/channels.py): mail and webhooks
implement Channel (prepare, send, adopt), the registry picks one by name, and a channel
registered there is used by submit() and flush() with no change to notify/core.py."""

from __future__ import annotations

import email
from email import policy
from pathlib import Path
from typing import Any

import pytest
from notifylib import free_port, make_cfg, report

from gpualert_slurm.core.config import Config
from gpualert_slurm.notify import channels, flush, submit
from gpualert_slurm.notify.channels import BUILTIN, Channel, MailChannel, WebhookChannel
from gpualert_slurm.notify.smtp import Outcome

REPO = Path(__file__).resolve().parent.parent


def test_mail_and_webhooks_implement_the_protocol_and_the_registry_picks_them() -> None:
    assert isinstance(channels.channel("mail"), MailChannel)
    assert isinstance(channels.channel("ops-slack"), WebhookChannel)
    for ch in (MailChannel(), WebhookChannel(), *BUILTIN.values()):
        assert isinstance(ch, Channel)


def test_notify_core_names_no_channel() -> None:
    """The dispatch is the registry's: no `channel == "mail"` left in the sending code."""
    text = (REPO / "gpualert_slurm" / "notify" / "core.py").read_text()
    assert '"mail"' not in text and "webhook." not in text and "smtp.send" not in text


def test_mail_prepare_keeps_the_envelope_and_refuses_no_recipient(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path / "spool", free_port())
    state: dict[str, Any] = {"channel": "mail"}
    data, permanent = MailChannel().prepare(cfg, report(), state)
    assert permanent is None and b"Subject: [gpualert] FAILED job 12 (train)" in data
    assert state["sender"] == "gpualert@cluster.example.org"
    assert state["recipients"] == ["alice@lab.example.org"] and state["refused"] == []
    msg = report()
    del msg["To"]
    _, permanent = MailChannel().prepare(cfg, msg, {"channel": "mail"})
    assert permanent == "no permitted recipient (no To/Cc/Bcc address)"


def test_webhook_prepare_is_the_subject_and_text_and_an_unknown_name_is_permanent(
        tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path / "spool", free_port(),
                   notify={"channels": {"ops": {"url": "json://127.0.0.1:9/hook"}}})
    data, permanent = WebhookChannel().prepare(cfg, report(), {"channel": "ops"})
    small = email.message_from_bytes(data, policy=policy.default)
    assert permanent is None and not small.is_multipart()
    assert small["Subject"] == "[gpualert] FAILED job 12 (train)"
    assert small.get_content().strip() == "CUDA out of memory on n2, rank 5"
    _, permanent = WebhookChannel().prepare(cfg, report(), {"channel": "gone"})
    assert permanent == f"channel gone is not in notify.channels of {cfg.path}"
    out = WebhookChannel().send(cfg, {"channel": "gone"}, data, 0.0)
    assert not out.ok and out.permanent


class _Recorder:
    """A channel of the test's own: keeps what it is sent; fails the first `fail` tries."""

    def __init__(self, fail: int = 0) -> None:
        self.sent: list[bytes] = []
        self.fail = fail

    def prepare(self, cfg: Config, msg: email.message.Message, state: dict[str, Any]
                ) -> tuple[bytes, str | None]:
        state["kind"] = "recorder"
        return msg.as_bytes(), None

    def send(self, cfg: Config, state: dict[str, Any], data: bytes, deadline: float
             ) -> Outcome:
        if self.fail:
            self.fail -= 1
            return Outcome(False, "recorder: not now")
        self.sent.append(data)
        return Outcome(True, "recorder: kept")

    def adopt(self, cfg: Config, read: Any, state: dict[str, Any]) -> str | None:
        return None


def test_a_registered_channel_is_used_by_submit_and_flush(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = _Recorder(fail=2)
    assert isinstance(rec, Channel)
    monkeypatch.setattr(channels, "BUILTIN", {**BUILTIN, "recorder": rec})
    cfg = make_cfg(tmp_path / "spool", free_port(), notify={"tries": 2, "backoff_s": 0})
    d = submit(report(subject="via the registry"), cfg=cfg, job_id="77",
               channels=["recorder"])
    assert d.status == "queued" and rec.sent == []
    assert "recorder: not now" in d.reason
    res = flush(cfg, everything=True)
    assert res.sent == 1 and len(rec.sent) == 1
    assert b"Subject: via the registry" in rec.sent[0]
