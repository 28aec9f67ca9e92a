"""The composer kit: what every set's composed (synthetic) cases share.

A composed case is a GPU failure no machine building the corpus can cause, written from the
documented format of the tool that prints it. This module holds the parts around the message
that every set's templates use: the job's preamble (`_pre`), tracebacks (`_tb`, `_user_frames`,
`_torch_frames`), torch's hint strings (`ASYNC`, `DSA`), task logs and exit records (`_write`,
`_task`, `_one_task`, `_rank_task`, `_lost_task`, `_kernel_log`), Slurm's and Open MPI's lines
when a node is lost, the label (`synthetic_label`) and `compose`, the one driver that turns a
set's templates into a case. A set's own templates live in its module of this package
(`compose/__init__.py` maps template prefixes to modules).
"""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

import yaml

from corpus.gen import capture, transforms

SITE = "/opt/conda/envs/train/lib/python3.10/site-packages"
T0 = 1796000000.0
# What torch appends to a CUDA error's message: the asynchronous-report hint, the DSA note.
ASYNC = ("CUDA kernel errors might be asynchronously reported at some other API call, so the "
         "stacktrace below might be incorrect.\nFor debugging consider passing "
         "CUDA_LAUNCH_BLOCKING=1")
DSA = "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."


def _pre(rng: random.Random, name: str, steps: int, dist: bool = False, rank: int = 0) -> str:
    gpus = ["8xA100-80GB", "4xH100", "8xV100-32GB", "2xA40"]
    out = [f"[{name}] starting run {rng.randrange(1000, 9999)} on {rng.choice(gpus)}",
           f"torch {rng.choice(['2.1.2+cu121', '2.3.1+cu121', '2.5.1+cu124', '1.13.1+cu117'])}, "
           f"CUDA available: True, devices: {rng.choice([2, 4, 8])}"]
    if dist:
        host = rng.choice(["gpu-017", "a100-n03", "dgx-12", "node-g4"])
        out += [f"{host}:{rng.randrange(1000, 99999)}:{rng.randrange(1000, 99999)} [{rank}] "
                f"NCCL INFO Bootstrap : Using eth0:10.1.{rng.randrange(0, 255)}."
                f"{rng.randrange(1, 254)}<0>",
                f"{host}:{rng.randrange(1000, 99999)}:{rng.randrange(1000, 99999)} [{rank}] "
                "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.1.0.5<0>",
                f"{host}:{rng.randrange(1000, 99999)}:{rng.randrange(1000, 99999)} [{rank}] "
                f"NCCL INFO comm 0x{rng.randrange(1 << 40):x} rank {rank} nranks 8 cudaDev "
                f"{rank % 8} - Init COMPLETE"]
    loss = rng.uniform(2, 9)
    for s in range(steps):
        loss *= rng.uniform(0.9, 0.99)
        out.append(f"step {s * 50:6d} | loss {loss:.4f} | lr {rng.uniform(1e-5, 5e-4):.2e} | "
                   f"{rng.uniform(80, 400):.1f} samples/s")
    return "\n".join(out) + "\n"


def _tb(rng: random.Random, frames: list[tuple[str, str, str]], exc: str) -> str:
    lines = ["Traceback (most recent call last):"]
    for f, fn, code in frames:
        lines.append(f'  File "{f}", line {rng.randrange(20, 1800)}, in {fn}')
        lines.append(f"    {code}")
    return "\n".join(lines) + "\n" + exc + "\n"


def _user_frames(rng: random.Random) -> list[tuple[str, str, str]]:
    proj = rng.choice(["/home/jdoe/llm-ft", "/scratch/u123/vision", "/workspace/proj",
                       "/gpfs/home/ak/seg"])
    return [(f"{proj}/train.py", "<module>", "main(cfg)"),
            (f"{proj}/train.py", "main", "trainer.fit(model, loaders)"),
            (f"{proj}/engine.py", "train_one_epoch", "outputs = model(**batch)")]


def _torch_frames(rng: random.Random, tail: list[tuple[str, str, str]]) -> list:
    mod = f"{SITE}/torch/nn/modules/module.py"
    return [(mod, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)"),
            (mod, "_call_impl", "return forward_call(*args, **kwargs)")] + tail


def _size(rng: random.Random) -> str:
    v = rng.choice([rng.uniform(1, 900), rng.uniform(1, 80)])
    unit = "MiB" if v > 80 else "GiB"
    return f"{v:.2f} {unit}"


# ---------------------------------------------------------------- cases

def _write(d: Path, name: str, text: str, transform: str | None, cid: str) -> None:
    data = text.encode()
    if transform:
        data = transforms.apply(transform, data, cid)
    (d / name).write_bytes(data)


def _task(root: Path, d: Path, name: str, rank: int, code: int | None, sig: int | None,
          end: float, node: str | None = None, step: str = "run") -> dict:
    rec = {"node": node, "step": step, "rank": rank, "exit_code": code, "signal": sig,
           "core_dumped": False, "end_time": end}
    (d / name).with_suffix(".exit").write_text(json.dumps(rec) + "\n")
    return {"log": str((d / name).relative_to(root)), **{k: rec[k] for k in (
        "rank", "node", "step", "exit_code", "signal", "core_dumped", "end_time")}}


def _lost_task(root: Path, d: Path, name: str, rank: int, step: str = "0") -> dict:
    """A task whose node died with it: no exit record, nothing known of its end."""
    return {"log": str((d / name).relative_to(root)), "rank": rank, "node": None, "step": step,
            "exit_code": None, "signal": None, "core_dumped": False, "end_time": None}


def _rank_task(root: Path, d: Path, r: int, text: str, tr: str | None, cid: str,
               code: int | None, sig: int | None, end: float, node: str | None,
               alone: bool = False) -> dict:
    """Rank r's log 0.r.log (run.0.log when `alone`: the job's one task) shaped by the transform
    `tr`, and its exit record."""
    name = "run.0.log" if alone else f"0.{r}.log"
    _write(d, name, text, tr, cid)
    return _task(root, d, name, r, code, sig, round(end, 3), node=node,
                 step="run" if alone else "0")


def _one_task(root: Path, d: Path, text: str, tr: str | None, cid: str, end: float,
              code: int | None = 1, sig: int | None = None) -> list[dict]:
    """A case of one task: its log `run.0.log` (shaped by the transform `tr`) and exit record."""
    _write(d, "run.0.log", text, tr, cid)
    return [_task(root, d, "run.0.log", 0, code, sig, end)]


def _kernel_log(root: Path, d: Path, kern: str) -> str:
    """Write the driver's lines as the case's kernel.log; its path as the label names it."""
    (d / "kernel.log").write_text(kern)
    return str((d / "kernel.log").relative_to(root))


def _node_failure(node: str, what: str, stamp: str) -> str:
    """srun's and slurmstepd's lines when node `node` of the job stops answering (`what`: `JOB
    <id>` or `STEP <id>.<step>`, the step slurmstepd on n1 cancels)."""
    return (f"srun: error: Node failure on {node}\n"
            f"slurmstepd: error: *** {what} ON n1 CANCELLED AT {stamp} DUE TO NODE FAILURE, SEE "
            "SLURMCTLD LOG FOR DETAILS ***\n")


def _node_loss_times(rng: random.Random) -> tuple[float, int, str]:
    """(the case's end time, its Slurm job id, when slurmstepd says it cancelled the job)."""
    end = T0 + rng.randrange(0, 10**6)
    jid = rng.randrange(100000, 999999)
    stamp = (f"2026-0{rng.randrange(1, 10)}-1{rng.randrange(0, 9)}T0{rng.randrange(0, 9)}:"
             f"{rng.randrange(10, 59)}:{rng.randrange(10, 59)}")
    return end, jid, stamp


def _daemon_lost(rte: str, hnp: str, remote: str) -> str:
    """Open MPI's runtime (`rte`: ORTE, or PRTE from Open MPI 5) when it loses a node's daemon."""
    bar = "-" * 74
    return (f"{bar}\n{rte} has lost communication with a remote daemon.\n\n"
            f"  HNP daemon   : {hnp}\n  Remote daemon: {remote}\n\n"
            "This is usually due to either a failure of the TCP network\nconnection to the "
            "node, or possibly an internal failure of\nthe daemon itself. We cannot recover "
            f"from this failure, and\ntherefore will terminate the job.\n{bar}\n")


def _ranked(text: str, r: int) -> str:
    """torch >= 2.2 prefixes each line of a rank's uncaught exception with `[rankN]:`."""
    return "".join(f"[rank{r}]:{' ' if ln else ''}{ln}\n" for ln in text.rstrip("\n").split("\n"))


def _case(c: dict) -> tuple[str, dict, str, random.Random, str | None]:
    """(id, params, template, the case's random source seeded by its id, transform)."""
    return c["id"], c.get("params") or {}, c["synth"], random.Random(c["id"]), c.get("transform")


def compose(root: Path, d: Path, c: dict, single: dict | None = None,
            logged: dict | None = None, multi: dict | None = None, plain: tuple = (),
            aborted: tuple = (), codes: dict | None = None, steps: tuple = (2, 8),
            end_last: bool = False) -> dict:
    """Compose one case of a set's templates into `d`; its label.

    The case's end time is drawn first (last with `end_last`), then the template's text. A
    template is one of
    - `single[tmpl](rng, p)`: the message of one task, after the job's preamble (of
      `rng.randrange(*steps)` steps) unless the case's `kind` is in `plain` (a log that is the
      library's own output from its first line). It returns the body; or (body, bool: whether
      the preamble goes before it); or (body, the kernel's lines or None); or (whole text, exit
      code, signal). The task exits 1, or `codes[kind]` (exit code, signal), or is killed by
      SIGABRT where the kind is in `aborted`;
    - `logged[tmpl](rng, p)`: (the kernel's lines or None, one task's whole log);
    - `multi[tmpl](rng, p, d, root, cid, tr)`: writes its logs itself, returns (tasks, root
      rank) or (tasks, root rank, Slurm state)."""
    cid, p, tmpl, rng, tr = _case(c)
    end = 0.0 if end_last else T0 + rng.randrange(0, 10**6)
    kernel, root_rank, state, kind = None, None, c.get("slurm_state"), p.get("kind")
    code, sig = (None, 6) if kind in aborted else (codes or {}).get(kind, (1, None))
    if single and tmpl in single:
        body, kern, pre = single[tmpl](rng, p), None, kind not in plain
        if isinstance(body, tuple) and len(body) == 3:
            (body, code, sig), pre = body, False
        elif isinstance(body, tuple) and isinstance(body[1], bool):
            body, pre = body
        elif isinstance(body, tuple):
            body, kern = body
        text = (_pre(rng, c.get("name", "job"), rng.randrange(*steps)) if pre else "") + body
        kernel = _kernel_log(root, d, kern) if kern else None
    elif logged and tmpl in logged:
        kern, text = logged[tmpl](rng, p)
        kernel = _kernel_log(root, d, kern) if kern else None
    elif multi and tmpl in multi:
        tasks, root_rank, *rest = multi[tmpl](rng, p, d, root, cid, tr)
        state = rest[0] if rest and rest[0] else state
    else:
        raise ValueError(f"unknown synthetic template {tmpl!r}")
    end = T0 + rng.randrange(0, 10**6) if end_last else end
    if not (multi and tmpl in multi):
        tasks = _one_task(root, d, text, tr, cid, end, code, sig)
    return synthetic_label(c, cid, tmpl, p, tasks, root_rank, state, kernel, tr)


def after_preamble(fn, name: str = "train", steps: tuple = (3, 8)):
    """A `logged` template of `fn(rng, p)` -> (kernel lines or None, the job's text): the job's
    preamble goes before the text."""
    def logged(rng: random.Random, p: dict) -> tuple[str | None, str]:
        kern, job = fn(rng, p)
        return kern, _pre(rng, name, rng.randrange(*steps)) + job
    return logged


def catalogue(module: str) -> dict:
    """The message texts of a template module: catalogue/<module>.yaml (see `render`)."""
    name = module.rsplit(".", 1)[-1]
    return yaml.safe_load((Path(__file__).parent / "catalogue" / f"{name}.yaml").read_text())


_FIELDS = string.Formatter()


def fill(text: str, ns: dict) -> str:
    """`text` with each `{expression[!r][:spec]}` replaced by its value in `ns`, evaluated left
    to right as an f-string is (a case's random draws happen in that order); `{{` is a brace."""
    out = []
    for lit, expr, spec, conv in _FIELDS.parse(text):
        out.append(lit)
        if expr is not None:
            v = eval(expr, ns)  # noqa: S307 - the project's own catalogue, not input
            out.append(format(repr(v) if conv == "r" else v, spec))
    return "".join(out)


def _frames(spec: list, ns: dict) -> list:
    """Traceback frames: each item an expression giving frames, or [file, function, code]."""
    out: list = []
    for f in spec:
        out += eval(f, ns) if isinstance(f, str) else [tuple(fill(x, ns) for x in f)]  # noqa: S307
    return out


def catalogued(entries: dict, module: dict):
    """A template `(rng, p)` whose every kind is a catalogue entry, rendered in the module's
    names (`module`: its globals()) with `rng`, `p` and `kind`."""
    def template(rng: random.Random, p: dict) -> str | tuple:
        return render(entries[p["kind"]], {**module, "rng": rng, "p": p, "kind": p["kind"]})
    return template


def render(entry: dict, ns: dict) -> str | tuple:
    """One entry of a catalogue (compose/catalogue/*.yaml: a template module's message texts by
    function and kind) in `ns`, the template's module and locals (`rng`, `uf`, …). In order: the
    `let` values, then `head`, the traceback (`frames`: an expression giving frames, or [file,
    function, code]; then `exc`), `tail`; or `text` alone; or `log`, a list of texts and
    tracebacks. `{…}` in a text is an expression, evaluated where it stands, as in an f-string;
    a `let` value that is one `{expression}` alone is that expression's value (a number), one
    that holds `frames` is a list of frames.
    Returns the text, or (text, *also)."""
    ns = {**globals(), **ns}  # the kit's names (SITE, ASYNC, …), then the template's
    for name, value in (entry.get("let") or {}).items():
        if isinstance(value, dict):  # frames, made here (their draws happen here)
            ns[name] = _frames(value["frames"], ns)
            continue
        fields = list(_FIELDS.parse(value))
        if len(fields) == 1 and fields[0][0] == "" and fields[0][1] and not fields[0][2]:
            ns[name] = eval(fields[0][1], ns)  # noqa: S307 - one `{expression}`: its value
        else:
            ns[name] = fill(value, ns)
    parts = entry.get("log") or [entry.get("head", ""), entry if "exc" in entry else "",
                                 entry.get("tail", entry.get("text", ""))]
    text = ""
    for part in parts:
        if isinstance(part, str):
            text += fill(part, ns)
            continue
        text += _tb(ns["rng"], _frames(part["frames"], ns), fill(part["exc"], ns))
    return (text, *entry["also"]) if "also" in entry else text


def synthetic_label(c: dict, cid: str, tmpl: str, p: dict, tasks: list, root_rank, state,
                    kernel=None, tr=None) -> dict:
    """The label of a composed case (shared by every synthetic*.py): the case's own fields win
    over what the template made."""
    t0 = tasks[0]
    return capture.label(
        cid, c["class"], tasks, command=f"synthetic:{tmpl} {json.dumps(p, sort_keys=True)}",
        source="synthetic", how=c.get("how") or f"template {tmpl} ({p})",
        root_rank=c.get("root_rank", root_rank),
        exit_code=c.get("exit_code", t0["exit_code"]), signal_=c.get("signal", t0["signal"]),
        slurm_state=state, kernel_log=kernel, transform=tr)
