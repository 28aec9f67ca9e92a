"""Composed tuning-corpus cases (template `f7_julia`, ids `f7r-*`) for Julia scripts that die of
an uncaught exception: Julia is not in Debian, so these follow its documented format instead
of a run (the Go, Rust, R, Node.js and gfortran f7r- cases are really run: progs/native/f7_*).

A script run as `julia script.jl` that throws prints (base/client.jl exec_options ->
display_error, base/errorshow.jl showerror) "ERROR: LoadError: <Type>: <msg>", a "Stacktrace:"
of "[k] f(args)" lines each followed by "@ Module file:line", and "in expression starting at
<file>:<line>"; an exception in a task shows "TaskFailedException" and its "nested task error:";
base/loading.jl's missing package "ArgumentError: Package X not found in current path." with a
"- Run `import Pkg; Pkg.add(...)`" hint; base/boot.jl's OutOfMemoryError() from an Array that
could not be allocated. The surroundings (Julia's "[ Info:" logging) vary with the case id.
"""

from __future__ import annotations

import random
from pathlib import Path

from corpus.gen.compose.kit import compose

JULIA = "/opt/julia-1.10.4/share/julia"


def _info(rng: random.Random, script: str) -> str:
    n = rng.choice([60000, 120000, 250000])
    out = [f"[ Info: running {script} with {rng.choice([8, 16, 32])} threads",
           f"[ Info: loaded {n} samples from /scratch/u/data/train.jld2"]
    loss = rng.uniform(1.5, 3.0)
    for e in range(1, rng.randrange(2, 5)):
        loss *= rng.uniform(0.7, 0.95)
        out.append(f"epoch {e}: loss {loss:.4f}, {rng.uniform(20, 90):.1f} s")
    return "\n".join(out) + "\n"


def _frames(rows: list[tuple[str, str]], indent: str = "") -> str:
    return "".join(f"{indent} [{i}] {f}\n{indent}   @ {at}\n" for i, (f, at) in enumerate(rows, 1))


def julia(rng: random.Random, p: dict) -> tuple[None, str]:
    script = rng.choice(["/home/u/mnist/train.jl", "/home/u/sim/run.jl", "/work/u/fit/main.jl"])
    line = rng.randrange(12, 90)
    top = ("top-level scope", f"{script}:{line}")
    end = f"in expression starting at {script}:{line}\n"
    kind = p["kind"]
    if kind == "dimension":
        a, b = rng.choice([(256, 784), (128, 512), (64, 1024)]), rng.choice([(512, 64), (10, 32)])
        head = (f"ERROR: LoadError: DimensionMismatch: A has dimensions ({a[0]},{a[1]}) but B "
                f"has dimensions ({b[0]},{b[1]})\n")
        mm = f"LinearAlgebra {JULIA}/stdlib/v1.10/LinearAlgebra/src/matmul.jl"
        rows = [("_generic_matmatmul!(C::Matrix{Float32}, tA::Char, tB::Char, A::Matrix{Float32}"
                 ", B::Matrix{Float32}, _add::LinearAlgebra.MulAddMul{true, true, Bool, Bool})",
                 f"{mm}:{rng.randrange(780, 800)}"),
                ("generic_matmatmul!", f"{mm}:772 [inlined]"),
                ("mul!", f"{mm}:263 [inlined]"),
                ("forward(m::Dense, x::Matrix{Float32})", f"Main {script}:{line - 9}"),
                top]
        text = head + "Stacktrace:\n" + _frames(rows) + end
    elif kind == "package":
        pkg = rng.choice(["CUDA", "Flux", "CSV", "DifferentialEquations"])
        head = (f"ERROR: LoadError: ArgumentError: Package {pkg} not found in current path.\n"
                f"- Run `import Pkg; Pkg.add(\"{pkg}\")` to install the {pkg} package.\n")
        rows = [("macro expansion", "./loading.jl:1772 [inlined]"),
                ("macro expansion", "./lock.jl:267 [inlined]"),
                ("__require(into::Module, mod::Symbol)", "Base ./loading.jl:1753"),
                ("require(into::Module, mod::Symbol)", "Base ./loading.jl:1746"), top]
        text = head + "Stacktrace:\n" + _frames(rows) + end
        return None, text  # `using` is the script's first line: nothing ran before it
    elif kind == "oom":
        n = rng.choice([400000, 250000, 180000])
        rows = [("Array", "./boot.jl:477 [inlined]"), ("Array", "./boot.jl:486 [inlined]"),
                ("zeros", "./array.jl:636 [inlined]"),
                ("zeros(::Type{Float64}, ::Int64, ::Int64)", "Base ./array.jl:632"),
                ("kernel_matrix(X::Matrix{Float64})", f"Main {script}:{line - 4}"), top]
        text = (f"[ Info: building the {n}x{n} kernel matrix\nERROR: LoadError: "
                "OutOfMemoryError()\nStacktrace:\n" + _frames(rows) + end)
    else:  # "nested_oom": the allocation fails inside a Threads.@spawn task
        inner = [("Array", "./boot.jl:477 [inlined]"), ("similar", "./array.jl:375 [inlined]"),
                 ("simulate_block(k::Int64)", f"Main {script}:{line - 20}"),
                 ("(::var\"#3#4\"{Int64})()", "Main ./threadingconstructs.jl:416")]
        outer = [("wait", "./task.jl:352 [inlined]"), ("fetch", "./task.jl:372 [inlined]"),
                 ("iterate", "./generator.jl:47 [inlined]"),
                 ("collect(itr::Base.Generator{Vector{Task}, typeof(fetch)})",
                  "Base ./array.jl:834"), top]
        text = ("ERROR: LoadError: TaskFailedException\n\n    nested task error: "
                "OutOfMemoryError()\n    Stacktrace:\n" + _frames(inner, "    ") +
                "Stacktrace:\n" + _frames(outer) + end)
    return None, _info(rng, script) + text


def build(root: Path, d: Path, c: dict) -> dict:
    """Compose one `f7_*` case into `d`; return its label."""
    return compose(root, d, c, logged={"f7_julia": julia})
