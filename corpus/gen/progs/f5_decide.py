"""Really-run programs for the decision-order weaknesses held-out set 5 showed (corpus.yaml's
`f5d-` block, corpus/README.md "After holdout5"): `python f5_decide.py MODE [ARG ...]`.

exit 0 after a printed traceback and a line saying the work stopped (a silent failure of the
traceback's class), and the same traceback survived (success):
  thread_crash     a shard thread raises, its excepthook prints the traceback, main says the
                   worker crashed and stops, exit 0
  thread_fallback  the same crash, main falls back to doing the shard itself, exit 0 (success)
  cli_export DIR   an argparse CLI catches the missing source file, prints the traceback and
                   "export aborted", sys.exit(0)
  click_convert DIR a click command reads a binary file as text, echoes the traceback and
                   "conversion failed, exiting", exits 0
  keras_stop       a Keras callback's metric fails at an epoch end: logging.exception, then it
                   stops training (stop_training); the script exits 0
  keras_go_on      the same callback fails once and training goes on to its end (success)
a quiet rank under torch.distributed (gloo, CPU): the others see their peer go away
  quiet BAD AT     rank BAD leaves with exit code 3 at step AT and prints nothing
  sigkill BAD AT   rank BAD is killed (SIGKILL) at step AT
an exception reported only inside Markdown prose (a job-summary writer, exit 1)
  md_summary fnf DIR    a summary table row whose cell holds the exception in a code span
  md_summary alloc DIR  a summary sentence with the exception in bold mid-sentence (also
                        parse: a ValueError the same way)
for Slurm jobs (corpus.yaml kind slurm)
  flaky MARK       fails (traceback, exit 1) unless MARK exists, which it then creates: a
                   step that fails once and passes when the script retries it
  pool_grow MB     a ProcessPoolExecutor whose worker keeps MB-sized blocks until the cgroup
                   OOM killer kills it (BrokenProcessPool in the parent)
  spawn_grow MB    torch.multiprocessing.spawn, child 1 keeps MB-sized blocks until killed
  dl_table MB      DataLoader workers whose worker_init_fn loads an MB-sized lookup table each
                   (and worker 1 a copy per batch): the cgroup OOM killer kills a worker
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback


def say(*a: object) -> None:
    print(*a, flush=True)


def _shard_mean(rows: list[float]) -> float:
    return sum(rows) / len(rows)


def _shards() -> dict[str, list[float]]:
    return {f"shard-{i}": ([] if i == 2 else [float(j) for j in range(i * 10, i * 10 + 10)])
            for i in range(4)}


def _threaded(fallback: bool) -> None:
    results: dict[str, float] = {}

    def work(name: str, rows: list[float]) -> None:
        time.sleep(0.05)
        results[name] = _shard_mean(rows)

    shards = _shards()
    threads = [threading.Thread(target=work, args=(n, r), name=n) for n, r in shards.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sys.stderr.flush()
    missing = [n for n in shards if n not in results]
    for n in sorted(results):
        say(f"{n}: mean {results[n]:.2f}")
    if not missing:
        say("all shards done")
        return
    if not fallback:
        say(f"shard worker {missing[0]} crashed; stopping")
        sys.exit(0)
    say(f"shard worker {missing[0]} crashed; falling back to serial processing")
    for n in missing:
        rows = shards[n] or [0.0]
        for i in range(6):
            say(f"{n}: serial pass {i + 1}/6 over {len(rows)} rows")
        results[n] = _shard_mean(rows)
    say(f"all {len(results)} shards done (1 serially)")


def cli_export(argv: list[str]) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="export-onnx")
    ap.add_argument("--src", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    say(f"exporting {a.src} -> {a.out}")
    try:
        with open(a.src, "rb") as f:
            blob = f.read()
        with open(a.out, "wb") as f:
            f.write(blob)
    except Exception:
        traceback.print_exc()
        sys.stderr.flush()
        say("export aborted")
        sys.exit(0)  # the wrapper treats any non-zero status as "retry", so the CLI says 0


def click_convert(workdir: str) -> None:
    import click

    src = os.path.join(workdir, "labels.csv")
    with open(src, "wb") as f:  # a gzip'd file where a CSV was expected
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xff\xfe\xfd" * 40)

    @click.command()
    @click.argument("path")
    @click.pass_context
    def convert(ctx: click.Context, path: str) -> None:
        click.echo(f"converting {path} to parquet")
        try:
            with open(path, encoding="utf-8") as f:
                rows = [line.split(",") for line in f]
            click.echo(f"{len(rows)} rows")
        except Exception:
            click.echo(traceback.format_exc().rstrip(), err=True)
            click.echo("conversion failed, exiting", err=True)
            ctx.exit(0)

    convert.main([src], standalone_mode=True)


def _keras(go_on: bool) -> None:
    os.environ.setdefault("KERAS_BACKEND", "torch")
    import json

    import keras
    import numpy as np

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                        stream=sys.stdout)
    log = logging.getLogger("train")

    class MetricsFile(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.failed = 0

        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            try:
                # a numpy float32 is not JSON serialisable: the metrics file write fails
                row = {"epoch": epoch, "loss": np.float32((logs or {}).get("loss", 0.0))}
                if epoch == (1 if go_on else 2):
                    json.dumps(row)
            except Exception:
                self.failed += 1
                if go_on:
                    log.exception("metrics callback failed at epoch %d; continuing without "
                                  "the metrics file", epoch)
                else:
                    log.exception("metrics callback crashed at epoch %d; stopping training",
                                  epoch)
                    self.model.stop_training = True
            sys.stdout.flush()

    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1))).astype("float32")
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    epochs = 5 if go_on else 8
    model.fit(x, y, epochs=epochs, batch_size=64, verbose=2, callbacks=[MetricsFile()])
    sys.stdout.flush()
    if go_on:
        log.info("training finished after %d epochs", epochs)


def _dist(mode: str, bad: int, at: int) -> None:
    import datetime
    import signal

    import torch
    import torch.distributed as dist

    env = os.environ
    rank = int(env.get("RANK", env.get("SLURM_PROCID", 0)))
    world = int(env.get("WORLD_SIZE", env.get("SLURM_NTASKS", 1)))
    if "MASTER_ADDR" not in env:
        env["MASTER_ADDR"] = env.get("F5D_MASTER", "127.0.0.1")
        env["MASTER_PORT"] = env.get("F5D_PORT", "29861")
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=30))
    say(f"[{rank}/{world}] gloo group ready")
    torch.manual_seed(rank)
    w = torch.zeros(16)
    for step in range(12):
        g = torch.randn(16)
        if rank == bad and step == at:
            time.sleep(0.5)  # the others are waiting in all_reduce by then
            if mode == "quiet":
                os._exit(3)  # no message, no flush of anything else: just gone
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(g)
        w -= 0.01 * g / world
        if step % 3 == 0:
            say(f"[{rank}/{world}] step {step} |w| {w.norm():.4f}")
        time.sleep(0.3)
    dist.destroy_process_group()
    say(f"[{rank}/{world}] done")


def flaky(mark: str) -> None:
    say(f"syncing 24 tokenizer shards from the object store (host {os.uname().nodename})")
    if not os.path.exists(mark):
        open(mark, "w").close()
        raise ConnectionResetError(104, "Connection reset by peer")
    for i in range(0, 24, 6):
        say(f"shards {i}-{i + 5} synced")
    say("sync complete")


def _grow(mb: int) -> int:
    blocks = []
    while True:
        blocks.append(bytearray(os.urandom(1)) * (mb << 20))
        if len(blocks) % 4 == 0:
            say(f"  worker {os.getpid()} holds {len(blocks) * mb} MiB")
        time.sleep(0.02)
    return len(blocks)  # never reached


def pool_grow(mb: int) -> None:
    from concurrent.futures import ProcessPoolExecutor

    say("tokenising 8 shards with 2 worker processes")
    with ProcessPoolExecutor(max_workers=2) as ex:
        futs = [ex.submit(_grow if i == 1 else len, mb if i == 1 else "x" * i) for i in range(8)]
        for i, f in enumerate(futs):
            say(f"shard {i}: {f.result()} tokens")


def _spawn_child(i: int, mb: int) -> None:
    if i == 1:
        _grow(mb)
    say(f"  child {i} done")


def spawn_grow(mb: int) -> None:
    import torch.multiprocessing as mp

    say("building the feature index with 2 spawned children")
    mp.spawn(_spawn_child, args=(mb,), nprocs=2, join=True)


def md_summary(kind: str, workdir: str) -> None:
    """Run the pipeline's steps; write a GitHub-style Markdown job summary, no traceback."""
    def load_weights() -> None:
        with open(os.path.join(workdir, "weights", "encoder.safetensors"), "rb") as f:
            f.read(8)

    def alloc_cache() -> None:
        import numpy as np

        np.zeros((1 << 20, 1 << 20), dtype=np.float64)  # 8 TiB: a unit mix-up in the config

    def parse_labels() -> None:
        rows = ["0.5", "1.25", "n/a", "2.0"]  # a cell the export left empty as "n/a"
        sum(float(r) for r in rows)

    doing = {"fnf": ("load_weights", load_weights), "alloc": ("alloc_cache", alloc_cache),
             "parse": ("parse_labels", parse_labels)}[kind]
    steps = [("tokenise", lambda: None), doing, ("train", lambda: None)]
    say("## Pipeline summary\n")
    failed = None
    if kind == "fnf":
        say("| step | status | detail |\n|------|--------|--------|")
    for name, fn in steps:
        if failed:
            if kind == "fnf":
                say(f"| {name} | skipped | - |")
            continue
        try:
            fn()
            if kind == "fnf":
                say(f"| {name} | ok | - |")
        except Exception as e:
            failed = f"{type(e).__module__}.{type(e).__qualname__}".removeprefix("builtins.")
            if kind == "fnf":
                say(f"| {name} | failed | `{failed}: {e}` |")
            else:
                say(f"Step `{name}` did not finish: **{failed}: {e}** (the remaining steps "
                    "were skipped).")
    sys.exit(1 if failed else 0)


def dl_table(mb: int) -> None:
    import numpy as np
    import torch
    from torch.utils.data import DataLoader, Dataset, get_worker_info

    class Captions(Dataset):
        table: list = []

        def __len__(self) -> int:
            return 4096

        def __getitem__(self, i: int) -> torch.Tensor:
            info = get_worker_info()
            if info is not None and info.id == 1:  # this worker re-reads the table per batch
                self.table.append(np.ones(mb << 17))
            return torch.full((16,), float(i % 7))

    def load_table(worker_id: int) -> None:
        Captions.table = [np.ones(mb << 17)]  # mb MiB of float64 per worker

    say(f"captioning with 2 workers, a {mb} MiB lookup table each")
    dl = DataLoader(Captions(), batch_size=8, num_workers=2, worker_init_fn=load_table)
    for step, batch in enumerate(dl):
        if step % 20 == 0:
            say(f"step {step} mean {batch.mean():.3f}")


def main() -> None:
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "thread_crash":
        _threaded(False)
    elif mode == "thread_fallback":
        _threaded(True)
    elif mode == "cli_export":
        d = args[0]
        cli_export(["--src", os.path.join(d, "ckpt", "encoder-best.pt"),
                    "--out", os.path.join(d, "encoder.onnx")])
    elif mode == "click_convert":
        click_convert(args[0])
    elif mode == "keras_stop":
        _keras(False)
    elif mode == "keras_go_on":
        _keras(True)
    elif mode in ("quiet", "sigkill"):
        _dist(mode, int(args[0]), int(args[1]))
    elif mode == "md_summary":
        md_summary(args[0], args[1])
    elif mode == "flaky":
        flaky(args[0])
    elif mode == "pool_grow":
        pool_grow(int(args[0]))
    elif mode == "dl_table":
        dl_table(int(args[0]))
    elif mode == "spawn_grow":
        spawn_grow(int(args[0]))
    else:
        raise SystemExit(f"f5_decide.py: unknown mode {mode!r}")


if __name__ == "__main__":
    main()
