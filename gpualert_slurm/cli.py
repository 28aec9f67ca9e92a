"""The `gpualert` command: a thin dispatcher; `gpualert NAME` runs commands/NAME.py's main().

Three of those modules only hand on to where their command lives, beside what it serves:
commands/hook.py to hooks/, commands/mailprog.py to notify/mailprog.py, commands/watch.py to
recovery/watch.py."""

from __future__ import annotations

import importlib
import sys

from gpualert_slurm import __version__

# name -> one-line help; the command is gpualert_slurm.commands.<name>. Modules are imported only
# when their command runs, so a broken optional part (say, the classifier) never stops
# `gpualert run`.
COMMANDS: dict[str, str] = {
    "run": "run a command with gpualert's guarantees, outside Slurm",
    "classify": "classify the task logs of one job",
    "eval": "score the classifier on a labelled corpus",
    "show": "print the report of a finished job",
    "doctor": "check an installation and say how to fix it",
    "gc": "remove old job dirs from the spool (retention; admins)",
    "hook": "entry points for Slurm's Prolog/Epilog (admins)",
    "flush": "send the reports waiting in the outbox (admins)",
    "mailprog": "Slurm's MailProg, enriched (admins)",
    "metrics": "Prometheus metrics for node_exporter's textfile collector (admins: a timer)",
    "status": "monitored jobs now, recovery state (admins)",
    "watch": "hang and straggler alerts for running jobs "
             "(admins: a timer or service on the controller)",
    "history": "what recovery decided and did (admins)",
    "resume": "resume nodes gpualert drained; reset the breaker",
    "web": "the web pages of your jobs on 127.0.0.1 (as yourself)",
}


def _usage() -> str:
    lines = ["usage: gpualert [--version] COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<10} {text}" for name, text in COMMANDS.items()]
    lines.append("\n`gpualert COMMAND --help` for a command's options.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return 0 if args else 2
    if args[0] == "--version":
        print(f"gpualert {__version__}")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"gpualert: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    if name != "run":  # run's child writes to the terminal itself, as without gpualert
        from gpualert_slurm.core.termsafe import SafeStream

        # Job data (output, names, paths) reaches what every admin command prints: its
        # control characters are shown escaped, never interpreted by the terminal.
        sys.stdout = SafeStream(sys.stdout)  # type: ignore[assignment]
        sys.stderr = SafeStream(sys.stderr)  # type: ignore[assignment]
    module = importlib.import_module("gpualert_slurm.commands." + name)
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
