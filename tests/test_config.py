"""The site config: defaults, the shipped example, and a clear one-line error for each mistake."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpualert_slurm.core.config import Config, ConfigError, load_config

REPO = Path(__file__).resolve().parent.parent


def write(tmp_path, text):
    p = tmp_path / "gpualert.yaml"
    p.write_text(text)
    return str(p)


def test_missing_file_gives_defaults(tmp_path):
    cfg = load_config(str(tmp_path / "absent.yaml"))
    assert cfg == Config()
    assert cfg.spool == "/var/spool/gpualert" and cfg.recovery.mode == "monitor"


def test_env_var_chooses_the_file(tmp_path, monkeypatch):
    p = write(tmp_path, "spool: /srv/gpa\n")
    monkeypatch.setenv("GPUALERT_CONFIG", p)
    assert load_config().spool == "/srv/gpa"


def test_shipped_example_loads_and_is_annotated():
    path = REPO / "etc" / "gpualert.yaml"
    cfg = load_config(str(path))
    assert cfg.path == str(path)
    assert cfg.mail.domain == "lab.example.org"
    assert cfg.recovery.actions == ("requeue", "exclude_node")
    assert cfg.budget_bytes == 20 * 1024**2
    assert path.read_text().count("#") > 10  # every key explained


def test_all_keys(tmp_path):
    cfg = load_config(write(tmp_path, """
spool: /data/spool/
default_monitoring: true
hook_timeout_s: 12.5
epilog_wait_s: 0
budget: 1G
hang: 2h
mail: {relay: "smtp.lab.org:587", from: "hpc@lab.org", domain: lab.org}
recovery: {mode: action, actions: [drain_node, hold, cancel], max_retries: 0}
"""))
    assert cfg.spool == "/data/spool"
    assert cfg.default_monitoring is True
    assert cfg.hook_timeout_s == 12.5 and cfg.epilog_wait_s == 0
    assert cfg.budget_bytes == 1024**3 and cfg.hang_s == 7200
    assert (cfg.mail.relay_host, cfg.mail.relay_port) == ("smtp.lab.org", 587)
    assert cfg.mail.sender == "hpc@lab.org" and cfg.mail.domain == "lab.org"
    assert cfg.recovery.mode == "action"
    assert cfg.recovery.actions == ("drain_node", "hold", "cancel")
    assert cfg.recovery.max_retries == 0


@pytest.mark.parametrize("text,expect", [
    ("spool: relative/dir\n", "spool: expected an absolute path"),
    ("spool: 5\n", "spool: expected an absolute path, got 5"),
    ("default_monitoring: yes please\n", "default_monitoring: expected true or false"),
    ("hook_timeout_s: 0\n", "hook_timeout_s: expected a number from 1 to 3600"),
    ("hook_timeout_s: true\n", "hook_timeout_s: expected a number"),
    ("budget: lots\n", "budget: expected a size like 500K, 20M or 1G"),
    ("hang: 30\n", "hang: expected a duration"),
    ("mail: {relay: smtp.lab.org}\n", "mail.relay: expected host:port"),
    ("mail: {relay: 'h:70000'}\n", "mail.relay: expected host:port with a port from 1"),
    ("mail: {from: nobody}\n", "mail.from: expected an address user@domain"),
    # A trailing newline must not slip through into a mail header.
    ('mail: {from: "hpc@lab.org\\n"}\n', "mail.from: expected an address user@domain"),
    ('mail: {relay: "smtp.lab.org:25\\n"}\n', "mail.relay: expected host:port"),
    ("mail: {domain: 'a b'}\n", "mail.domain: expected a domain"),
    ("mail: [a, b]\n", "mail: expected a mapping"),
    ("recovery: {mode: yolo}\n", "recovery.mode: expected monitor or action, got 'yolo'"),
    ("recovery: {actions: [reboot]}\n", "recovery.actions: expected a list of requeue"),
    ("recovery: {actions: requeue}\n", "recovery.actions: expected a list"),
    ("recovery: {max_retries: -1}\n", "recovery.max_retries: expected an integer from 0"),
    ("spoool: /x\n", "unknown key spoool (accepted: spool, default_monitoring"),
    ("mail: {realy: 'a:1'}\n", "unknown key mail.realy (accepted: relay, host, port, from, domain"),
    ("- just\n- a list\n", "top level: expected a mapping"),
    ("spool: [unclosed\n", "not valid YAML"),
])
def test_errors_name_file_key_and_accepted(tmp_path, text, expect):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert msg.startswith(f"gpualert: config {p}")
    assert expect in msg
    assert "\n" not in msg


def test_unreadable_is_a_config_error(tmp_path):
    d = tmp_path / "dir.yaml"
    d.mkdir()
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(str(d))


def test_empty_file_gives_defaults(tmp_path):
    assert load_config(write(tmp_path, "# nothing\n")).spool == Config().spool


def test_doctor_reports_bad_config_without_traceback(tmp_path):
    p = write(tmp_path, "recovery: {mode: yolo}\n")
    r = subprocess.run([sys.executable, "-m", "gpualert_slurm", "doctor", "--config", p],
                       capture_output=True, text=True, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "Traceback" not in r.stderr + r.stdout
    assert "recovery.mode: expected monitor or action" in r.stdout
