"""Every path and module that docs/MAP.md and docs/ARCHITECTURE.md name exists (issue 30).

A name in backticks that looks like a path (`hooks/prolog.py`, `spank/copier.c`,
`classify/rules/`, `CONTRACTS.md`) must be a file or folder of the tree: from the repository
root, from gpualert_slurm/ or docs/, or as the end of a path in the tree (`scan/python.py`).
A dotted name whose first part is a module of the package (`core.verdict.read_run`,
`gate.slots()`, `gpualert_slurm.notify`) must import by its file: the module exists, and the
next name is defined in it (or is a module below it). Left out, on purpose: absolute paths
(`/run/gpualert`: the machine's, not the tree's), placeholders (`<spool>/<job>/`,
`tasks/*.exit`, `attempt-N/`), config keys (`recovery.mode`: keys of etc/gpualert.yaml or
fields of core/config.py, under a config section), command lines (anything with a space), and
the names a running job has in the spool (RUNTIME). A doc that names a file after it was
renamed or removed fails here, with the name and the doc."""

from __future__ import annotations

import ast
import os
import re
from functools import cache
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
PKG = REPO / "gpualert_slurm"
DOCS = ("docs/MAP.md", "docs/ARCHITECTURE.md")
SKIP_DIRS = {".git", "build", "dist", "__pycache__", "gpualert_slurm.egg-info", ".ruff_cache",
             ".pytest_cache", "node_modules"}
# Names a job's spool dir or the node has at run time (docs/CONTRACTS.md), not the tree's.
RUNTIME = {"nodes/", "tasks/", "quarantine/", ".outbox/", "pending/", "arrays/"}
# A bare file name (no folder) is checked only for these endings: verdict.json, tap.log,
# job.json are the job's files at run time.
BARE_EXTS = (".md", ".py", ".c", ".h", ".yaml", ".j2", ".sh", ".cfg", ".toml")
PLACEHOLDER = re.compile(r"[<>*{}$%|\s]|\.\.\.|…|(?<![A-Za-z])(N|NN|NAME)(?![A-Za-z])")
DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+(\(\))?$")


def spans(text: str) -> list[str]:
    """The `code` spans of a Markdown page (fenced and indented blocks are not spans)."""
    out = []
    for m in re.finditer(r"(`+)(.+?)\1", text, re.S):
        out.append(m.group(2).strip())
    return out


@cache
def tree() -> frozenset[str]:
    """Every file and folder of the tree, as paths relative to the root ('a/b.py', 'a/b')."""
    seen = set()
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        rel = os.path.relpath(root, REPO)
        if rel != ".":
            seen.add(rel)
        for f in files:
            seen.add(f if rel == "." else f"{rel}/{f}")
    return frozenset(seen)


@cache
def config_words() -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(sections, dotted keys of etc/gpualert.yaml, field names of core/config.py)."""
    data = yaml.safe_load((REPO / "etc" / "gpualert.yaml").read_text())
    keys: set[str] = set()

    def walk(d: dict, prefix: str) -> None:
        for k, v in d.items():
            name = f"{prefix}.{k}" if prefix else str(k)
            keys.add(name)
            if isinstance(v, dict):
                walk(v, name)
    walk(data, "")
    sections = {k for k, v in data.items() if isinstance(v, dict)}
    fields = set()
    for node in ast.walk(ast.parse((PKG / "core" / "config.py").read_text())):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            fields.add(node.target.id)
    return frozenset(sections), frozenset(keys), frozenset(fields)


def path_exists(tok: str) -> bool:
    p = tok.rstrip("/")
    if "/" not in p:  # a bare file name: anywhere in the tree, or a page beside these docs
        return any(t == p or t.endswith("/" + p) for t in tree())
    return (p in tree() or f"gpualert_slurm/{p}" in tree() or f"docs/{p}" in tree()
            or any(t.endswith("/" + p) for t in tree()))


@cache
def module_files() -> dict[str, list[Path]]:
    """A module's dotted name under the package, and each of its name's tails, -> its files
    ('core.verdict', 'verdict' -> core/verdict.py; 'classify' -> classify/__init__.py)."""
    out: dict[str, list[Path]] = {}
    for f in PKG.rglob("*.py"):
        parts = list(f.relative_to(PKG).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not parts:
            continue
        for i in range(len(parts)):
            out.setdefault(".".join(parts[i:]), []).append(f)
    out["gpualert_slurm"] = [PKG / "__init__.py"]
    for k in list(out):
        if k != "gpualert_slurm":
            out.setdefault("gpualert_slurm." + k, out[k])
    return out


@cache
def defined(f: Path) -> frozenset[str]:
    names = set()
    for node in ast.walk(ast.parse(f.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names.add(n.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def module_problem(tok: str) -> str | None:
    """None when the dotted name is no module reference or resolves; else what is missing."""
    parts = tok.removesuffix("()").split(".")
    mods = module_files()
    if parts[0] not in mods:
        return None  # not the package's (a file name like drainer.lock, a Slurm name)
    sections, keys, fields = config_words()
    if parts[0] in sections and (tok in keys or parts[-1] in fields):
        return None  # a config key (recovery.actions, notify.total_timeout_s)
    # the longest prefix that is a module, then the next name must be defined in it
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in mods:
            if n == len(parts):
                return None
            attr = parts[n]
            if any(attr in defined(f) for f in mods[name]):
                return None
            files = ", ".join(str(f.relative_to(REPO)) for f in mods[name])
            return f"{attr!r} is not defined in {name} ({files})"
    return f"no module {parts[0]}"


def problems(doc: str, text: str | None = None) -> list[str]:
    if text is None:
        text = (REPO / doc).read_text()
    out = []
    for tok in spans(text):
        if PLACEHOLDER.search(tok) or tok.startswith(("/", "-", "~")) or tok in RUNTIME:
            continue
        if DOTTED.match(tok) and not tok.endswith(BARE_EXTS + (".json", ".log", ".lock",
                                                               ".conf", ".so", ".png")):
            why = module_problem(tok)
            if why:
                out.append(f"{doc}: `{tok}`: {why}")
            continue
        looks_like_path = "/" in tok or tok.endswith(BARE_EXTS)
        if not looks_like_path or not re.fullmatch(r"[A-Za-z0-9_./+@-]+", tok):
            continue
        if not path_exists(tok):
            out.append(f"{doc}: `{tok}`: no such file or folder in the tree")
    return out


@pytest.mark.parametrize("doc", DOCS)
def test_every_path_and_module_the_doc_names_exists(doc):
    missing = problems(doc)
    assert not missing, "the doc names what the tree does not have:\n  " + "\n  ".join(missing)


def test_the_checker_sees_a_missing_path_and_module():
    """The check itself: a page naming a removed file, a removed module and a name a module
    lacks fails with each named; a page of existing names, placeholders and config keys
    passes."""
    page = ("`hooks/no_such_worker.py`, `spank/gone.c`, `core.no_such_module`, "
                    "`core.verdict.no_such_name`, `rules.yaml`\n"
                    "`hooks/prolog.py`, `core.verdict.read_run`, `gate.slots()`, "
                    "`<spool>/<job>/`, `recovery.mode`, `tasks/`, `/run/gpualert`, "
                    "`gpualert hook prolog`, `scan/python.py`, `CONTRACTS.md`\n")
    found = problems("docs/X.md", page)
    joined = "\n".join(found)
    for name in ("hooks/no_such_worker.py", "spank/gone.c", "core.no_such_module",
                 "core.verdict.no_such_name", "rules.yaml"):
        assert f"`{name}`" in joined, (name, found)
    assert len(found) == 5, found


def test_the_recovery_page_carries_the_action_table():
    """docs/RECOVERY.md shows the recovery actions as core/vocab.py's ACTION_SPECS rows make
    them (vocab.actions_table()), not a second copy in prose that can drift."""
    from gpualert_slurm.core import vocab

    text = (REPO / "docs" / "RECOVERY.md").read_text()
    assert vocab.actions_table() in text, (
        "docs/RECOVERY.md's action table differs from vocab.actions_table(); paste:\n"
        + vocab.actions_table())
