"""Webhook channels through apprise, against a real HTTP receiver on 127.0.0.1: what each kind
posts, the same outbox and bounds as mail, channels chosen by the config's rules."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from notifylib import HookReceiver, free_port, make_cfg, report

from gpualert_slurm.notify import flush, submit
from gpualert_slurm.notify.outbox import Outbox


def channels(port: int, **more: dict) -> dict:
    return {"channels": {
        "plain": {"url": f"json://127.0.0.1:{port}/gpualert"},
        "ntfy": {"url": f"ntfy://127.0.0.1:{port}/gpu-jobs"},
        "mm": {"url": f"mmost://127.0.0.1:{port}/tok123"},
        **more,
    }}


def waiting(cfg, quarantined=False):
    with Outbox(cfg.outbox).open(create=False) as ob:
        return ob.ids(quarantined)


@pytest.mark.parametrize("name,path,check", [
    ("plain", "/gpualert", lambda p: (p["title"], p["message"])),
    ("ntfy", "/", lambda p: (p["title"], p["message"])),
    ("mm", "/hooks/tok123", lambda p: tuple(p["text"].split("\r\n", 1))),
])
def test_each_webhook_kind_posts_title_and_text(tmp_path, name, path, check):
    with HookReceiver() as hook:
        cfg = make_cfg(tmp_path / "spool", free_port(), notify=channels(hook.port))
        d = submit(report(), cfg=cfg, job_id="40", channels=[name])
        assert d.status == "sent", d.reason
        [(method, got_path, _headers, body)] = hook.requests
    assert method == "POST" and got_path == path
    title, text = check(json.loads(body))
    assert title == "[gpualert] FAILED job 12 (train)"
    assert text.strip() == "CUDA out of memory on n2, rank 5"  # the plain part, not the HTML
    assert waiting(cfg) == []


def test_rule_picks_mail_and_a_webhook_for_the_job(tmp_path, smtp_server):
    with HookReceiver() as hook:
        notify = channels(hook.port)
        notify["rules"] = [{"users": ["alice"], "channels": ["mail", "plain"]}]
        cfg = make_cfg(tmp_path / "spool", smtp_server.port, notify=notify)
        jobdir = Path(cfg.spool) / "41"
        jobdir.mkdir()
        (jobdir / "job.json").write_text(json.dumps({"user": "alice", "partition": "gpu"}))
        d = submit(report(), cfg=cfg, job_id="41")  # channels=None: the config decides
        assert d.status == "sent", d.reason
        assert [c.channel for c in d.channels] == ["mail", "plain"]
        assert len(hook.requests) == 1
        assert len(smtp_server.messages()) == 1
        # Another user matches no rule: notify.default (mail) only.
        (jobdir / "job.json").write_text(json.dumps({"user": "bob"}))
        d = submit(report(), cfg=cfg, job_id="41")
        assert [c.channel for c in d.channels] == ["mail"] and len(hook.requests) == 1


def test_endpoint_error_queues_and_flush_delivers_later(tmp_path):
    with HookReceiver() as hook:
        hook.status = 500
        cfg = make_cfg(tmp_path / "spool", free_port(),
                       notify={**channels(hook.port), "tries": 1})
        d = submit(report(subject="later"), cfg=cfg, job_id="42", channels=["plain"])
        assert d.status == "queued", d.reason
        assert "500" in d.reason or "not accepted" in d.reason
        assert len(waiting(cfg)) == 1
        hook.status = 200
        res = flush(cfg, everything=True)
        assert res.sent == 1, res
        assert json.loads(hook.requests[-1][3])["title"] == "later"
    assert waiting(cfg) == []


def test_endpoint_that_never_answers_is_bounded(tmp_path):
    with HookReceiver() as hook:
        hook.delay = 8
        cfg = make_cfg(tmp_path / "spool", free_port(),
                       notify={**channels(hook.port), "total_timeout_s": 2, "tries": 1},
                       mail={"connect_timeout_s": 1, "send_timeout_s": 1})
        t0 = time.monotonic()
        d = submit(report(), cfg=cfg, job_id="43", channels=["plain"])
        took = time.monotonic() - t0
    assert took < 2 + 0.5, took
    assert d.status == "queued" and len(waiting(cfg)) == 1


def test_endpoint_down_queues(tmp_path):
    cfg = make_cfg(tmp_path / "spool", free_port(),
                   notify={**channels(free_port()), "tries": 1})
    d = submit(report(), cfg=cfg, job_id="44", channels=["ntfy"])
    assert d.status == "queued", d.reason
    assert len(waiting(cfg)) == 1


def test_unknown_channel_and_bad_url_are_quarantined_with_the_reason(tmp_path):
    cfg = make_cfg(tmp_path / "spool", free_port(),
                   notify=channels(free_port(), odd={"url": "nosuchservice://x/y"}))
    d = submit(report(), cfg=cfg, job_id="45", channels=["nosuch", "odd"])
    assert d.status == "quarantined"
    assert "channel nosuch is not in notify.channels" in d.reason
    assert "apprise does not accept this URL" in d.reason
    assert len(waiting(cfg, quarantined=True)) == 2


def test_secret_url_file_must_be_root_only(tmp_path):
    with HookReceiver() as hook:
        secret = tmp_path / "hook-url"
        secret.write_text(f"json://127.0.0.1:{hook.port}/secret-path\n")
        os.chmod(secret, 0o600)
        cfg = make_cfg(tmp_path / "spool", free_port(),
                       notify={"channels": {"s": {"url_file": str(secret)}}})
        assert submit(report(), cfg=cfg, job_id="46", channels=["s"]).status == "sent"
        assert hook.requests[0][1] == "/secret-path"
        os.chmod(secret, 0o644)
        d = submit(report(), cfg=cfg, job_id="47", channels=["s"])
        assert d.status == "quarantined" and "chmod 600" in d.reason
        assert len(hook.requests) == 1


def test_slack_url_is_accepted_by_config_and_apprise(tmp_path):
    # apprise's Slack plugin posts to hooks.slack.com, which no test here can reach; the
    # payload is the same incoming-webhook format Mattermost's test above receives.
    import apprise

    url = "slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7"
    cfg = make_cfg(tmp_path / "spool", free_port(), notify={"channels": {"lab": {"url": url}}})
    assert cfg.notify.channel("lab").url == url
    assert apprise.Apprise().add(url)


def test_channel_config_errors_are_clear():
    from gpualert_slurm.core.config import ConfigError, parse_config

    cases = [
        ({"channels": {"mail": {"url": "json://x"}}}, "not 'mail', the built-in channel"),
        ({"channels": {"a": {}}}, "give exactly one of url"),
        ({"channels": {"a": {"url": "no scheme"}}}, "an apprise URL"),
        ({"default": ["slack"]}, "notify.default: expected channels defined"),
        ({"rules": [{"users": ["x"]}]}, "notify.rules[0].channels"),
        ({"max_attempts": 0}, "notify.max_attempts: expected an integer from 1"),
    ]
    for notify, expected in cases:
        with pytest.raises(ConfigError) as e:
            parse_config({"notify": notify}, "/etc/gpualert/gpualert.yaml")
        assert expected in str(e.value), (notify, str(e.value))
