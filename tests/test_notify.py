"""Mail delivery through the outbox, against real SMTP servers on 127.0.0.1: sent, queued,
quarantined, flushed later; bounded when the relay is down, silent, dripping or rejecting;
nothing lost; no header injection."""

from __future__ import annotations

import email
import email.message
import json
import os
import subprocess
import sys
import time
from email import policy
from pathlib import Path

import pytest
from notifylib import (
    code_relay,
    drip_listener,
    fill,
    free_port,
    greet_and_hang_up,
    make_certs,
    make_cfg,
    report,
    silent_listener,
    small_tmpfs,
)

from gpualert_slurm.commands.doctor import check_outbox
from gpualert_slurm.notify import flush, safe_header, submit
from gpualert_slurm.notify.outbox import Outbox, new_id

REPO = Path(__file__).resolve().parent.parent


def outbox_ids(cfg, quarantined=False):
    with Outbox(cfg.outbox).open(create=False) as ob:
        return ob.ids(quarantined)


def read_mail(path: Path) -> email.message.EmailMessage:
    return email.message_from_bytes(path.read_bytes(), policy=policy.default)


def test_sent_message_reaches_the_relay_and_leaves_the_outbox(tmp_path, smtp_server):
    cfg = make_cfg(tmp_path / "spool", smtp_server.port)
    d = submit(report(), cfg=cfg, job_id="12")
    assert d.status == "sent", d.reason
    assert d.path is None
    [m] = smtp_server.messages()
    got = read_mail(m)
    assert got["Subject"] == "[gpualert] FAILED job 12 (train)"
    assert got["X-Sink-Rcpt-To"] == "alice@lab.example.org"
    assert "CUDA out of memory" in got.get_body(("plain",)).get_content()
    assert outbox_ids(cfg) == [] and outbox_ids(cfg, True) == []
    st = os.stat(cfg.outbox)
    assert st.st_mode & 0o777 == 0o700 and st.st_uid == os.geteuid()


def test_relay_down_queues_then_flush_delivers_it(tmp_path, smtp_server):
    port = free_port()  # nothing listens here yet
    cfg = make_cfg(tmp_path / "spool", port)
    t0 = time.monotonic()
    d = submit(report(subject="kept for later"), cfg=cfg, job_id="13")
    assert time.monotonic() - t0 < cfg.notify.total_timeout_s + 1
    assert d.status == "queued", d.reason
    assert "connection refused" in d.reason
    assert d.path and Path(d.path).exists()
    kept = email.message_from_bytes(Path(d.path).read_bytes(), policy=policy.default)
    assert kept["Subject"] == "kept for later"
    state = json.loads(Path(d.path[:-4] + ".json").read_text())
    assert state["attempts"] == cfg.notify.tries and state["recipients"] == [
        "alice@lab.example.org"]

    # Not due yet: a plain flush leaves it; the relay comes back; flush --all sends it.
    assert flush(cfg).skipped == 1
    with code_relay(port) as (relay, _):
        res = flush(cfg, everything=True)
        assert (res.sent, res.waiting, res.quarantined) == (1, 0, 0), res
        [(sender, rcpts, data)] = relay.received
    assert sender == "gpualert@cluster.example.org" and rcpts == ["alice@lab.example.org"]
    assert b"Subject: kept for later" in data
    assert outbox_ids(cfg) == []


def test_gpualert_flush_command_sends_the_waiting_message(tmp_path):
    port = free_port()
    cfg = make_cfg(tmp_path / "spool", port)
    assert submit(report(subject="via the command"), cfg=cfg, job_id="14").status == "queued"
    conf = tmp_path / "gpualert.yaml"
    conf.write_text(json.dumps({
        "spool": cfg.spool, "mail": {"relay": f"127.0.0.1:{port}", "domain": "lab.example.org"},
    }))
    env = dict(os.environ, GPUALERT_CONFIG=str(conf))
    cmd = [sys.executable, "-m", "gpualert_slurm", "flush", "--all"]
    with code_relay(port) as (relay, _):
        listed = subprocess.run([sys.executable, "-m", "gpualert_slurm", "flush", "--list"],
                                cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0 and "waiting" in listed.stdout and "job 14 mail" in \
            listed.stdout, listed
        p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert "sent 1, waiting 0, quarantined 0" in p.stdout
        assert len(relay.received) == 1
    assert outbox_ids(cfg) == []


def test_silent_relay_times_out_within_the_bound(tmp_path):
    with silent_listener() as port:
        cfg = make_cfg(tmp_path / "spool", port, notify={"total_timeout_s": 3, "tries": 3})
        t0 = time.monotonic()
        d = submit(report(), cfg=cfg, job_id="15")
        took = time.monotonic() - t0
    assert took < 3 + 0.5, took
    assert d.status == "queued", d.reason
    assert "time bound" in d.reason or "no answer" in d.reason
    assert len(outbox_ids(cfg)) == 1


def test_dripping_relay_is_cut_at_the_hard_deadline(tmp_path):
    # Each read gets a byte within the per-command timeout; only the overall bound stops it.
    with drip_listener(0.2) as port:
        cfg = make_cfg(tmp_path / "spool", port, notify={"total_timeout_s": 2, "tries": 1},
                       mail={"connect_timeout_s": 1, "send_timeout_s": 1})
        t0 = time.monotonic()
        d = submit(report(), cfg=cfg, job_id="16")
        took = time.monotonic() - t0
    assert took < 2 + 0.7, took
    assert d.status == "queued", d.reason


def test_5xx_quarantines_with_the_reason_and_doctor_shows_it(tmp_path):
    with code_relay() as (relay, port):
        relay.rcpt_reply = "550 5.1.1 mailbox unavailable"
        cfg = make_cfg(tmp_path / "spool", port)
        d = submit(report(), cfg=cfg, job_id="17")
    assert d.status == "quarantined", d.reason
    assert "550" in d.reason and "mailbox unavailable" in d.reason
    assert d.path and "/quarantine/" in d.path and Path(d.path).exists()
    assert outbox_ids(cfg) == [] and len(outbox_ids(cfg, True)) == 1
    lines = [r.line() for r in check_outbox(cfg)]
    assert any(ln.startswith("warn ") and "1 message(s) given up on" in ln and "550" in ln
               and "flush --requeue" in ln for ln in lines), lines


def test_4xx_is_retried_then_quarantined_after_max_attempts(tmp_path):
    with code_relay() as (relay, port):
        relay.data_reply = "451 4.3.0 try again later"
        cfg = make_cfg(tmp_path / "spool", port, notify={"tries": 1, "max_attempts": 3})
        d = submit(report(), cfg=cfg, job_id="18")
        assert d.status == "queued" and "451" in d.reason
        r1 = flush(cfg, everything=True)
        assert (r1.sent, r1.waiting, r1.quarantined) == (0, 1, 0)
        r2 = flush(cfg, everything=True)
        assert (r2.sent, r2.waiting, r2.quarantined) == (0, 0, 1)
        assert flush(cfg, everything=True).waiting == 0  # never retried again
    [q] = outbox_ids(cfg, True)
    with Outbox(cfg.outbox).open(create=False) as ob:
        st = ob.read_state(q, True)
    assert st["attempts"] == 3 and "max_attempts" in st["last_error"]
    assert [h["error"][:3] for h in st["history"]][-1].startswith("rel")


def test_4xx_then_relay_recovers_nothing_lost(tmp_path):
    with code_relay() as (relay, port):
        relay.rcpt_reply = "421 4.7.0 busy"
        cfg = make_cfg(tmp_path / "spool", port)
        subjects = [f"report {i}" for i in range(5)]
        for i, s in enumerate(subjects):
            assert submit(report(subject=s), cfg=cfg, job_id=str(100 + i)).status == "queued"
        relay.rcpt_reply = None
        res = flush(cfg, everything=True)
        got = sorted(email.message_from_bytes(data)["Subject"] for _, _, data in relay.received)
    assert res.sent == 5 and got == subjects
    assert outbox_ids(cfg) == []


def test_quarantine_is_purged_after_quarantine_keep(tmp_path):
    with code_relay() as (relay, port):
        relay.rcpt_reply = "554 no"
        cfg = make_cfg(tmp_path / "spool", port, notify={"quarantine_keep": "1s"})
        assert submit(report(), cfg=cfg, job_id="19").status == "quarantined"
    assert len(outbox_ids(cfg, True)) == 1
    time.sleep(1.2)
    assert flush(cfg).purged == 1
    assert outbox_ids(cfg, True) == []


def test_requeue_sends_a_quarantined_message_after_the_fix(tmp_path):
    with code_relay() as (relay, port):
        relay.rcpt_reply = "550 relaying denied"
        cfg = make_cfg(tmp_path / "spool", port)
        assert submit(report(subject="second chance"), cfg=cfg, job_id="20").status == \
            "quarantined"
        relay.rcpt_reply = None  # the admin fixed the relay
        conf = tmp_path / "c.yaml"
        conf.write_text(json.dumps({"spool": cfg.spool,
                                    "mail": {"relay": f"127.0.0.1:{port}"}}))
        p = subprocess.run([sys.executable, "-m", "gpualert_slurm", "flush", "--requeue"],
                           cwd=REPO, env=dict(os.environ, GPUALERT_CONFIG=str(conf)),
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and "requeued 1" in p.stdout and "sent 1" in p.stdout, p
        assert [email.message_from_bytes(d)["Subject"] for _, _, d in relay.received] == [
            "second chance"]
    assert outbox_ids(cfg, True) == [] and outbox_ids(cfg) == []


def test_no_permitted_recipient_is_quarantined_and_named(tmp_path, smtp_server):
    cfg = make_cfg(tmp_path / "spool", smtp_server.port,
                   mail={"allow_domains": ["lab.example.org"]})
    d = submit(report(to="mallory@evil.example.com"), cfg=cfg, job_id="21")
    assert d.status == "quarantined"
    assert "mallory@evil.example.com" in d.reason and "allow_domains" in d.reason
    assert smtp_server.messages() == []
    # A mixed list: the allowed one gets it, the other is reported.
    d = submit(report(to="alice@lab.example.org, eve@evil.example.com"), cfg=cfg, job_id="22")
    assert d.status == "sent" and "eve@evil.example.com" in d.reason
    [m] = smtp_server.messages()
    assert read_mail(m)["X-Sink-Rcpt-To"] == "alice@lab.example.org"


def test_header_injection_through_job_name_is_neutralised(tmp_path, smtp_server):
    cfg = make_cfg(tmp_path / "spool", smtp_server.port)
    # Built the way a careless template would: a compat32 Message takes CR/LF as they come.
    name = "train\r\nBcc: victim@evil.example.com\r\nX-Injected: yes"
    msg = email.message.Message()
    msg["Subject"] = f"[gpualert] FAILED job 23 ({name})"
    msg["To"] = "alice@lab.example.org"
    msg["X-Gpualert-Workdir"] = "/home/alice/run\nX-Evil-Path: 1"
    msg.set_payload("body\n")
    d = submit(msg, cfg=cfg, job_id="23")
    assert d.status == "sent", d.reason
    [m] = smtp_server.messages()
    raw = m.read_bytes()
    got = read_mail(m)
    assert got["X-Sink-Rcpt-To"] == "alice@lab.example.org"  # no extra envelope recipient
    for injected in ("Bcc", "X-Injected", "X-Evil-Path"):
        assert got[injected] is None, raw
    assert b"\nBcc:" not in raw and b"\nX-Injected:" not in raw
    assert "Bcc: victim@evil.example.com X-Injected: yes" in " ".join(got["Subject"].split())
    assert safe_header("a\r\nb\nc\x00d") == "a b c d"


def test_full_outbox_filesystem_still_sends_and_says_so(tmp_path, smtp_server):
    spool = tmp_path / "spool"
    with small_tmpfs(spool, "64k"):
        cfg = make_cfg(spool, smtp_server.port)
        Outbox(cfg.outbox).open().close()  # the outbox exists, then the disk fills up
        fill(spool)
        d = submit(report(body="x" * 200_000), cfg=cfg, job_id="24")
        assert d.status == "sent", d.reason
        assert "no space left" in d.reason
        assert len(smtp_server.messages()) == 1


def test_full_outbox_filesystem_and_relay_down_fails_clearly(tmp_path):
    spool = tmp_path / "spool"
    with small_tmpfs(spool, "64k"):
        cfg = make_cfg(spool, free_port())
        Outbox(cfg.outbox).open().close()
        fill(spool)
        d = submit(report(body="x" * 200_000), cfg=cfg, job_id="25")
        assert d.status == "failed"
        assert "no space left" in d.reason and "connection refused" in d.reason
        assert outbox_ids(cfg) == []  # no partial entry left behind
        assert [n for n in os.listdir(cfg.outbox) if n.endswith(".tmp")] == []


def test_read_only_outbox_gives_a_delivery_not_an_exception(tmp_path):
    spool = tmp_path / "spool"
    with small_tmpfs(spool, "64k", "ro"):
        cfg = make_cfg(spool, free_port())
        d = submit(report(), cfg=cfg, job_id="26")
    assert d.status == "failed"
    assert "read-only file system" in d.reason and cfg.outbox in d.reason


def test_missing_spool_gives_a_clear_reason(tmp_path, smtp_server):
    cfg = make_cfg(tmp_path / "spool", smtp_server.port)
    os.rmdir(cfg.spool)
    d = submit(report(), cfg=cfg, job_id="27")
    assert d.status == "sent"  # the relay works: the report is not held back
    assert "does not exist" in d.reason and "create the spool" in d.reason
    cfg2 = make_cfg(tmp_path / "spool2", free_port())
    os.rmdir(cfg2.spool)
    d2 = submit(report(), cfg=cfg2, job_id="28")
    assert d2.status == "failed" and "does not exist" in d2.reason


def test_outbox_readable_by_others_is_refused(tmp_path, smtp_server):
    cfg = make_cfg(tmp_path / "spool", smtp_server.port)
    os.mkdir(cfg.outbox, 0o755)
    os.chmod(cfg.outbox, 0o755)
    d = submit(report(), cfg=cfg, job_id="29")
    assert d.status == "sent" and "chmod 700" in d.reason
    bad = [r for r in check_outbox(cfg) if not r.ok]
    assert bad and "mode 0755" in bad[0].problem


def test_flush_leaves_an_entry_that_submit_is_still_sending(tmp_path):
    with silent_listener() as port:
        cfg = make_cfg(tmp_path / "spool", port, notify={"total_timeout_s": 3, "tries": 1})
        import threading

        t = threading.Thread(target=submit, args=(report(),),
                             kwargs={"cfg": cfg, "job_id": "30"})
        t.start()
        time.sleep(0.5)
        res = flush(cfg, everything=True)
        t.join()
    assert res.skipped == 1 and res.sent == 0 and res.waiting == 0


def test_starttls_required_but_not_offered_is_a_config_error(tmp_path, smtp_server):
    cfg = make_cfg(tmp_path / "spool", smtp_server.port, mail={"tls": "starttls"})
    d = submit(report(), cfg=cfg, job_id="31")
    assert d.status == "quarantined" and "does not offer STARTTLS" in d.reason


def test_auth_with_a_root_only_password_file(tmp_path):
    from aiosmtpd.smtp import AuthResult

    def check(server, session, envelope, mechanism, auth_data):
        ok = auth_data.login == b"gpualert" and auth_data.password == b"s3cret"
        return AuthResult(success=ok, handled=False)  # handled=False: aiosmtpd answers 535

    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    os.chmod(pw, 0o600)
    with code_relay(authenticator=check, auth_require_tls=False) as (relay, port):
        cfg = make_cfg(tmp_path / "spool", port,
                       mail={"username": "gpualert", "password_file": str(pw)})
        assert submit(report(), cfg=cfg, job_id="32").status == "sent"
        assert len(relay.received) == 1
        pw.write_text("wrong\n")
        d = submit(report(), cfg=cfg, job_id="33")
        assert d.status == "quarantined" and "535" in d.reason, d.reason
        os.chmod(pw, 0o644)
        d = submit(report(), cfg=cfg, job_id="34")
        assert d.status == "quarantined" and "chmod 600" in d.reason
    assert len(relay.received) == 1


@pytest.mark.parametrize("yaml_mail,expected", [
    ({"password": "x"}, "mail.password: not accepted here"),
    ({"tls": "yes"}, "mail.tls: expected none or starttls or ssl"),
    ({"username": "u"}, "mail.username and mail.password_file go together"),
    ({"relay": "a:25", "host": "b"}, "keep one of them"),
    ({"port": 70000}, "mail.port: expected a port from 1 to 65535"),
    ({"allow_domains": ["lab.org", "bad domain"]}, "mail.allow_domains: expected a list"),
    ({"users": {"alice": "not an address"}}, "mail.users: expected a mapping"),
    ({"slurm_mail": "drop"}, "mail.slurm_mail: expected enrich, forward, suppress"),
])
def test_bad_mail_config_is_a_clear_error(tmp_path, yaml_mail, expected):
    from gpualert_slurm.core.config import ConfigError, parse_config

    with pytest.raises(ConfigError) as e:
        parse_config({"mail": yaml_mail}, "/etc/gpualert/gpualert.yaml")
    assert "/etc/gpualert/gpualert.yaml" in str(e.value) and expected in str(e.value)


def test_host_port_and_relay_spellings_agree(tmp_path):
    from gpualert_slurm.core.config import parse_config

    a = parse_config({"mail": {"host": "smtp.lab.org", "port": 587, "tls": "starttls"}}, "x")
    b = parse_config({"mail": {"relay": "smtp.lab.org:587", "tls": "starttls"}}, "x")
    assert a.mail == b.mail and a.mail.relay_port == 587
    assert parse_config({"mail": {"host": "smtp.lab.org", "tls": "ssl"}}, "x").mail.relay_port \
        == 465


def test_bcc_reaches_the_envelope_but_not_the_headers(tmp_path, smtp_server):
    cfg = make_cfg(tmp_path / "spool", smtp_server.port)
    msg = report()
    msg["Bcc"] = "ops@lab.example.org"
    assert submit(msg, cfg=cfg, job_id="35").status == "sent"
    [m] = smtp_server.messages()
    got = read_mail(m)
    assert got["X-Sink-Rcpt-To"] == "alice@lab.example.org, ops@lab.example.org"
    raw = m.read_bytes()
    assert got["Bcc"] is None and b"\nBcc:" not in raw
    assert raw.count(b"ops@lab.example.org") == 1  # only in the sink's envelope line
    assert msg["Bcc"] == "ops@lab.example.org"  # the caller's message is left as it was


def test_flush_stops_at_the_first_unanswered_connect(tmp_path):
    # Three reports wait; the relay accepts TCP and says nothing. One bounded try ends this
    # run's turn for mail: the flush takes one message's bound, not three.
    port = free_port()
    cfg = make_cfg(tmp_path / "spool", port, notify={"tries": 1})
    for i in range(3):
        assert submit(report(), cfg=cfg, job_id=str(40 + i)).status == "queued"
    with silent_listener() as silent:
        slow = make_cfg(tmp_path / "spool", silent, notify={"tries": 1, "total_timeout_s": 2})
        t0 = time.monotonic()
        res = flush(slow, everything=True)
        took = time.monotonic() - t0
    assert (res.sent, res.waiting, res.quarantined) == (0, 3, 0), res
    assert took < 2 + 1, took
    with Outbox(cfg.outbox).open(create=False) as ob:
        attempts = sorted(ob.read_state(i)["attempts"] for i in ob.ids())
    assert attempts == [1, 1, 2]  # only the first was tried again


def test_orphan_message_without_state_is_adopted_and_sent(tmp_path, smtp_server):
    # A crash between writing the .eml and its .json: flush takes the recipients from the
    # message's own headers instead of losing it.
    cfg = make_cfg(tmp_path / "spool", smtp_server.port)
    Outbox(cfg.outbox).open().close()
    orphan = Path(cfg.outbox) / f"{new_id('44', 'mail')}.eml"
    orphan.write_bytes(report(subject="orphan").as_bytes(policy=policy.SMTP))
    old = time.time() - 3600
    os.utime(orphan, (old, old))
    res = flush(cfg, everything=True)
    assert res.sent == 1, res
    [m] = smtp_server.messages()
    got = read_mail(m)
    assert got["Subject"] == "orphan" and got["X-Sink-Rcpt-To"] == "alice@lab.example.org"
    assert outbox_ids(cfg) == [] and not list(Path(cfg.outbox).glob("*.eml"))


def test_starttls_with_the_sites_ca(tmp_path):
    ca, server_ctx = make_certs(tmp_path / "tls")
    # require_starttls: the relay refuses MAIL before STARTTLS, so "sent" means TLS was used.
    with code_relay(tls_context=server_ctx, require_starttls=True) as (relay, port):
        cfg = make_cfg(tmp_path / "spool", port, mail={"tls": "starttls", "ca_file": str(ca)})
        d = submit(report(), cfg=cfg, job_id="50")
        assert d.status == "sent", d.reason
        assert len(relay.received) == 1
        # Without the site's CA the relay's certificate is not trusted: a config problem.
        cfg2 = make_cfg(tmp_path / "spool", port, mail={"tls": "starttls"})
        d2 = submit(report(), cfg=cfg2, job_id="51")
        assert d2.status == "quarantined" and "certificate not trusted" in d2.reason
        assert len(relay.received) == 1


def test_implicit_tls(tmp_path):
    ca, server_ctx = make_certs(tmp_path / "tls")
    with code_relay(ssl_context=server_ctx) as (relay, port):
        cfg = make_cfg(tmp_path / "spool", port, mail={"tls": "ssl", "ca_file": str(ca)})
        d = submit(report(), cfg=cfg, job_id="52")
        assert d.status == "sent", d.reason
        assert len(relay.received) == 1
        cfg2 = make_cfg(tmp_path / "spool", port, mail={"tls": "ssl"})
        d2 = submit(report(), cfg=cfg2, job_id="53")
        assert d2.status == "quarantined" and "certificate not trusted" in d2.reason
        assert "mail.ca_file" in d2.reason and len(relay.received) == 1


def test_long_outage_quarantines_by_age_even_untried(tmp_path):
    # The relay stays down: each flush tries only the first message, yet none outlives
    # notify.max_age, so the outbox cannot grow for ever.
    cfg = make_cfg(tmp_path / "spool", free_port(), notify={"tries": 1, "max_age": "1h"})
    for i in range(3):
        assert submit(report(), cfg=cfg, job_id=str(60 + i)).status == "queued"
    with Outbox(cfg.outbox).open(create=False) as ob:
        for entry in ob.ids():
            st = ob.read_state(entry)
            st["created"] -= 7200
            ob.write_state(entry, st)
    res = flush(cfg, everything=True)
    assert (res.sent, res.waiting, res.quarantined) == (0, 0, 3), res
    with Outbox(cfg.outbox).open(create=False) as ob:
        reasons = [ob.read_state(i, True)["last_error"] for i in ob.ids(True)]
    assert all("notify.max_age" in r for r in reasons) and len(reasons) == 3


def test_doctor_checks_the_password_file(tmp_path):
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    os.chmod(pw, 0o644)
    cfg = make_cfg(tmp_path / "spool", free_port(),
                   mail={"username": "gpualert", "password_file": str(pw)})
    [bad] = [r for r in check_outbox(cfg) if not r.ok]
    assert bad.check == f"SMTP password file {pw}" and "chmod 600" in bad.problem
    os.chmod(pw, 0o600)
    assert all(r.ok for r in check_outbox(cfg))


def test_flush_units_verify_and_their_command_runs(tmp_path, smtp_server):
    units = [REPO / "etc" / "systemd" / f"gpualert-flush.{k}" for k in ("service", "timer")]
    r = subprocess.run(["systemd-analyze", "verify", *map(str, units)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "OnUnitActiveSec=5min" in units[1].read_text()
    [exec_start] = [ln.split("=", 1)[1] for ln in units[0].read_text().splitlines()
                    if ln.startswith("ExecStart=")]
    argv = exec_start.split()
    assert argv[:2] == ["/opt/gpualert/venv/bin/gpualert", "flush"]
    # The unit's own command line (checkout code in place of the installed copy) sends what
    # waits.
    port = free_port()
    cfg = make_cfg(tmp_path / "spool", port)
    assert submit(report(), cfg=cfg, job_id="70").status == "queued"
    conf = tmp_path / "c.yaml"
    conf.write_text(json.dumps({"spool": cfg.spool,
                                "mail": {"relay": f"127.0.0.1:{smtp_server.port}"}}))
    p = subprocess.run([sys.executable, "-m", "gpualert_slurm", *argv[1:], "--all"], cwd=REPO,
                       env=dict(os.environ, GPUALERT_CONFIG=str(conf)), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and "sent 1" in p.stdout, p
    assert len(smtp_server.messages()) == 1


def test_554_greeting_is_permanent_421_greeting_is_not(tmp_path, smtp_server):
    """RFC 5321 3.1: a relay may answer the connection with 554 instead of 220 (this client is
    not served: a permanent refusal) or 421 (not now). The sink greets as told."""
    smtp_server.greeting = "554 5.7.1 cluster.example.org: no SMTP service here for you"
    cfg = make_cfg(tmp_path / "spool", smtp_server.port)
    t0 = time.monotonic()
    d = submit(report(subject="refused at hello"), cfg=cfg, job_id="31")
    assert time.monotonic() - t0 < 2, "a permanent refusal is not retried within the bound"
    assert d.status == "quarantined", d.reason
    assert "greeting" in d.reason and "554" in d.reason and "no SMTP service" in d.reason
    assert outbox_ids(cfg) == [] and len(outbox_ids(cfg, True)) == 1
    assert smtp_server.messages() == []

    smtp_server.greeting = "421 4.3.2 cluster.example.org: too busy, try later"
    d = submit(report(subject="not now"), cfg=cfg, job_id="32")
    assert d.status == "queued" and "421" in d.reason, d.reason
    assert smtp_server.messages() == []

    smtp_server.greeting = None  # the relay serves again: the 421 one goes at the next flush
    assert flush(cfg, everything=True).sent == 1
    [m] = smtp_server.messages()
    assert read_mail(m)["Subject"] == "not now"


def test_554_greeting_then_hang_up_is_permanent(tmp_path):
    with greet_and_hang_up(b"554 5.7.1 relay.example.org ESMTP not for you") as port:
        cfg = make_cfg(tmp_path / "spool", port)
        d = submit(report(), cfg=cfg, job_id="33")
    assert d.status == "quarantined", d.reason
    assert "refused at greeting: 554 5.7.1" in d.reason and "not for you" in d.reason
