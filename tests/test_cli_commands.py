"""`gpualert NAME` runs gpualert_slurm/commands/NAME.py (issue 30: subcommands and their modules
named alike): every command has its module, with a main(argv), and every module in commands/ is
a command. `gpualert hook`, the path every Slurm shim in epilog.d/ takes, still answers."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

from gpualert_slurm.cli import COMMANDS

REPO = Path(__file__).resolve().parent.parent
COMMANDS_DIR = REPO / "gpualert_slurm" / "commands"


def test_each_command_is_the_module_of_its_name():
    for name in COMMANDS:
        module = importlib.import_module(f"gpualert_slurm.commands.{name}")
        assert Path(module.__file__).name == f"{name}.py", name
        assert callable(module.main), name


def test_each_module_in_commands_is_a_command():
    modules = {p.stem for p in COMMANDS_DIR.glob("*.py") if p.stem != "__init__"}
    assert modules == set(COMMANDS), modules ^ set(COMMANDS)


def test_the_hook_command_reaches_the_hooks_package():
    # epilog.d/* run `gpualert hook prolog|epilog|epilog-slurmctld|queue`: a name it does not
    # know is refused with the hooks package's own message, --help its usage
    run = [sys.executable, "-m", "gpualert_slurm", "hook"]
    bad = subprocess.run([*run, "no-such-hook"], capture_output=True, text=True, cwd=REPO,
                         timeout=60)
    assert bad.returncode == 2
    assert "gpualert hook: expected one of prolog, epilog, epilog-slurmctld, queue" in bad.stderr
    ok = subprocess.run([*run, "--help"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert ok.returncode == 0
    assert "usage: gpualert hook {prolog|epilog|epilog-slurmctld|queue}" in ok.stdout


def test_mailprog_and_watch_answer_by_their_names():
    for name in ("mailprog", "watch", "eval", "gc"):
        p = subprocess.run([sys.executable, "-m", "gpualert_slurm", name, "--help"],
                           capture_output=True, text=True, cwd=REPO, timeout=60)
        assert p.returncode == 0, (name, p.stderr)
        assert p.stdout.startswith(f"usage: gpualert {name} "), (name, p.stdout[:200])
