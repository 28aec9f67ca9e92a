"""Who gets a report: mail=, else the job's --mail-user (read from Slurm on the real cluster),
else the site's user->address rule; every address through the domain allowlist, refusals
reported. And which channels a job's report goes to."""

from __future__ import annotations

import clusterlib
from notifylib import free_port, make_cfg

from gpualert_slurm.core.options import parse_options
from gpualert_slurm.notify import resolve_channels, resolve_recipients


def cfg_with(tmp_path, **mail):
    return make_cfg(tmp_path / "spool", free_port(), mail=mail)


def test_mail_option_wins_in_every_form(tmp_path):
    cfg = cfg_with(tmp_path)
    env = {"SLURM_JOB_USER": "alice", "SLURM_JOB_MAIL_USER": "other@lab.example.org"}
    want = ["a@lab.example.org", "b@lab.example.org"]
    opts = parse_options("mail=a@lab.example.org:b@lab.example.org")
    for form in (opts, opts.to_json(), {"mail": "a@lab.example.org:b@lab.example.org"}):
        r = resolve_recipients(form, env, cfg)
        assert list(r) == want and r.source == "mail= option" and r.refused == []


def test_mail_user_from_the_environment(tmp_path):
    cfg = cfg_with(tmp_path)
    r = resolve_recipients({}, {"SLURM_JOB_USER": "alice",
                                "SLURM_JOB_MAIL_USER": "al@elsewhere.example.org"}, cfg)
    assert list(r) == ["al@elsewhere.example.org"] and r.source == "--mail-user"


def test_user_rule_map_before_domain(tmp_path):
    cfg = cfg_with(tmp_path, users={"alice": "alice.smith@physics.example.org"})
    assert resolve_recipients({}, {"SLURM_JOB_USER": "alice"}, cfg) == [
        "alice.smith@physics.example.org"]
    r = resolve_recipients({}, {"SLURM_JOB_USER": "bob"}, cfg)
    assert r == ["bob@lab.example.org"] and r.source == "mail.users/mail.domain"


def test_allowlist_refusals_are_reported_not_dropped(tmp_path):
    cfg = cfg_with(tmp_path, allow_domains=["lab.example.org"])
    r = resolve_recipients({"mail": ["a@lab.example.org", "b@cs.lab.example.org",
                                     "eve@gmail.example.com"]}, {}, cfg)
    assert list(r) == ["a@lab.example.org", "b@cs.lab.example.org"]  # subdomains allowed
    [(addr, why)] = r.refused
    assert addr == "eve@gmail.example.com" and "not in mail.allow_domains" in why


def test_source_routed_addresses_are_refused(tmp_path):
    """user%evil.example.com@lab.example.org ends in an allowed domain, and a relay that honours
    the percent hack delivers it to evil.example.com (issue 28)."""
    cfg = cfg_with(tmp_path, allow_domains=["lab.example.org"])
    r = resolve_recipients({"mail": ["x%evil.example.com@lab.example.org",
                                     "evil.example.com!x@lab.example.org", "a@lab.example.org"]},
                           {}, cfg)
    assert list(r) == ["a@lab.example.org"]
    assert [a for a, _ in r.refused] == ["x%evil.example.com@lab.example.org",
                                         "evil.example.com!x@lab.example.org"]
    assert "source routing" in r.refused[0][1]  # '!' is no address character at all


def test_owner_policy_sends_a_report_to_its_users_own_address_only(tmp_path):
    """mail.recipients: owner: the job's mail= and --mail-user cannot make gpualert mail
    anyone else in its name; each other address is refused and said."""
    cfg = cfg_with(tmp_path, recipients="owner", users={"alice": "alice@lab.example.org"})
    env = {"SLURM_JOB_USER": "alice", "SLURM_JOB_MAIL_USER": "boss@lab.example.org"}
    r = resolve_recipients({"mail": ["ceo@lab.example.org", "alice@lab.example.org"]}, env, cfg)
    assert list(r) == ["alice@lab.example.org"]
    assert [a for a, _ in r.refused] == ["ceo@lab.example.org"]
    assert "mail.recipients is 'owner'" in r.refused[0][1]
    # only others asked for: the user's own address instead, the others refused
    r = resolve_recipients({}, env, cfg)
    assert list(r) == ["alice@lab.example.org"] and r.refused[0][0] == "boss@lab.example.org"
    r = resolve_recipients({}, {"SLURM_JOB_USER": "alice"}, cfg)
    assert list(r) == ["alice@lab.example.org"] and r.refused == []


def test_recipients_policy_is_checked_in_the_config(tmp_path):
    import pytest

    from gpualert_slurm.core.config import ConfigError

    with pytest.raises(ConfigError, match="mail.recipients"):
        cfg_with(tmp_path, recipients="everyone")


def test_no_rule_for_the_user_says_so(tmp_path):
    cfg = cfg_with(tmp_path, domain=None)
    r = resolve_recipients({}, {"SLURM_JOB_USER": "carol"}, cfg)
    assert list(r) == [] and r.refused and "mail.domain" in r.refused[0][1]


def test_mail_user_from_slurm_on_the_cluster(cluster, workdir, tmp_path):
    cfg = cfg_with(tmp_path)
    script = "#!/bin/bash\ntrue\n"
    jobs = []
    try:
        with_addr = clusterlib.submit(script, "--hold", "--mail-type=FAIL",
                                      "--mail-user=bob@lab.example.org", workdir=workdir)
        bare = clusterlib.submit(script, "--hold", "--mail-type=FAIL", workdir=workdir,
                                 name="bare.sh")
        none = clusterlib.submit(script, "--hold", workdir=workdir, name="none.sh")
        jobs = [with_addr, bare, none]
        env = {"SLURM_JOB_USER": cluster.user}
        r = resolve_recipients({}, {**env, "SLURM_JOB_ID": str(with_addr)}, cfg)
        assert list(r) == ["bob@lab.example.org"] and r.source == "--mail-user"
        # --mail-type alone: Slurm's MailUser is the bare user name, mapped by the config.
        r = resolve_recipients({}, {**env, "SLURM_JOB_ID": str(bare)}, cfg)
        assert list(r) == [f"{cluster.user}@lab.example.org"] and r.source == "--mail-user"
        r = resolve_recipients({}, {**env, "SLURM_JOB_ID": str(none)}, cfg)
        assert list(r) == [f"{cluster.user}@lab.example.org"]
        assert r.source == "mail.users/mail.domain"
    finally:
        clusterlib.cancel_quietly(*jobs)


def test_channels_by_rule_first_match_else_default(tmp_path):
    notify = {"channels": {"hook": {"url": "json://127.0.0.1:9/x"}},
              "default": ["mail"],
              "rules": [{"partitions": ["gpu-long"], "channels": ["mail", "hook"]},
                        {"users": ["alice"], "accounts": ["ml"], "channels": ["hook"]}]}
    cfg = make_cfg(tmp_path / "spool", free_port(), notify=notify)
    assert resolve_channels({"user": "bob", "partition": "gpu-long"}, cfg) == ["mail", "hook"]
    assert resolve_channels({"SLURM_JOB_USER": "alice", "SLURM_JOB_ACCOUNT": "ml"}, cfg) == [
        "hook"]
    assert resolve_channels({"user": "alice", "account": "physics"}, cfg) == ["mail"]
