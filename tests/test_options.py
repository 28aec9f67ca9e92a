"""The --gpualert grammar: the same verdicts and messages as the C plugin."""

import pytest

from gpualert_slurm.core.options import OptionError, Options, options_from_env, parse_options


@pytest.mark.parametrize("text", [None, "", "on"])
def test_defaults(text):
    assert parse_options(text) == Options()
    assert parse_options(text).notify == "fail"


def test_off_turns_monitoring_off():
    assert parse_options("off").monitored is False


@pytest.mark.parametrize("text,word", [("mail=a@b.org,off", "off"), ("on,hang=1h", "on")])
def test_on_and_off_stand_alone(text, word):
    with pytest.raises(OptionError) as e:
        parse_options(text)
    assert str(e.value) == (f"gpualert: bad option {word}: '{word}' cannot be combined with "
                            "other options")


def test_full_option_set():
    o = parse_options("mail=me@lab.org:you@x-y.lab.org,notify=always,"
                      "artifacts=ckpt/*.pt:logs/*.txt,"
                      "hang=30m,budget=500K,checkpoint=ckpt/last.pt,recover=on")
    assert o.mail == ("me@lab.org", "you@x-y.lab.org")
    assert o.notify == "always"
    assert o.artifacts == ("ckpt/*.pt", "logs/*.txt")
    assert o.hang_s == 1800
    assert o.budget_bytes == 500 * 1024
    assert o.checkpoint == "ckpt/last.pt"
    assert o.recover is True
    assert o.monitored


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("30m", 1800), ("2h", 7200),
                                          ("1d", 86400)])
def test_durations(text, seconds):
    assert parse_options(f"hang={text}").hang_s == seconds


@pytest.mark.parametrize("text,size", [("500K", 512000), ("20M", 20 * 1024**2),
                                       ("1G", 1024**3), ("3k", 3072)])
def test_sizes(text, size):
    assert parse_options(f"budget={text}").budget_bytes == size


def test_recover_off():
    assert parse_options("recover=off").recover is False


def test_a_key_given_twice():
    with pytest.raises(OptionError) as e:
        parse_options("notify=never,notify=always")
    assert str(e.value) == "gpualert: bad option notify=always: notify given twice"


@pytest.mark.parametrize("text", ["mail=a@b.org,", ",hang=1h", "hang=1h,,notify=fail"])
def test_empty_items(text):
    with pytest.raises(OptionError) as e:
        parse_options(text)
    assert str(e.value) == (f"gpualert: empty option in '{text}' "
                            "(accepted: KEY=VALUE[,KEY=VALUE...])")


def test_too_long():
    with pytest.raises(OptionError, match="bad option list: longer than 1024 characters"):
        parse_options("artifacts=" + "a" * 1020)


@pytest.mark.parametrize("text,message", [
    ("hang=30", "gpualert: bad option hang=30: a duration like 90s, 30m, 2h or 1d"),
    ("hang=0s", "gpualert: bad option hang=0s:"),
    ("hang=-5m", "gpualert: bad option hang=-5m:"),
    ("budget=1T", "gpualert: bad option budget=1T: a size like 500K, 20M or 1G"),
    ("budget=", "gpualert: bad option budget=:"),
    ("notify=sometimes", "gpualert: bad option notify=sometimes: fail, always or never"),
    ("recover=yes", "gpualert: bad option recover=yes: on or off"),
    ("mail=a b@c", "gpualert: bad option mail=a b@c: one or more addresses local@domain"),
    ("mail=me", "gpualert: bad option mail=me: one or more addresses local@domain"),
    ("mail=me@lab.org\n", "gpualert: bad option mail=me@lab.org\n:"),
    ("mail=me@.org", "gpualert: bad option mail=me@.org:"),
    ("hang= 30m", "gpualert: bad option hang= 30m:"),
    ("hang=30m\n", "gpualert: bad option hang=30m\n:"),
    ("hang=30M", "gpualert: bad option hang=30M:"),
    ("hang=1234567890s", "gpualert: bad option hang=1234567890s:"),
    ("mail=a@b::c", "gpualert: bad option mail=a@b::c:"),
    ("mail=x@y;rm", "gpualert: bad option mail=x@y;rm:"),
    ("mail", "gpualert: bad option mail=:"),
    ("artifacts=a:", "gpualert: bad option artifacts=a::"),
    ("artifacts=a\nb", "gpualert: bad option artifacts=a\nb:"),
    ("off=1", "gpualert: bad option off: 'off' cannot be combined with other options"),
])
def test_bad_values(text, message):
    with pytest.raises(OptionError) as e:
        parse_options(text)
    assert str(e.value).startswith(message)


@pytest.mark.parametrize("key", ["mial", "email", "Mail", "hang_s", " mail"])
def test_unknown_key(key):
    with pytest.raises(OptionError) as e:
        parse_options(f"{key}=x")
    assert str(e.value) == (f"gpualert: unknown option {key} (accepted: mail, notify, "
                            "artifacts, hang, budget, checkpoint, recover, off)")


def test_unknown_bare_word():
    with pytest.raises(OptionError, match="unknown option yes "):
        parse_options("yes")


def test_env_absent_uses_site_default():
    assert options_from_env(None, True).monitored is True
    assert options_from_env(None, False).monitored is False
    assert options_from_env("on", False).monitored is True
    assert options_from_env("off", True).monitored is False


def test_to_json_round_trips_lists():
    d = parse_options("mail=a@b.c,artifacts=x").to_json()
    assert d["mail"] == ["a@b.c"] and d["artifacts"] == ["x"] and d["monitored"] is True
