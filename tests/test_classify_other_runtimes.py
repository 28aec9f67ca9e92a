"""The family of classify/rules/72-other-runtimes.yaml: programs in other runtimes than Python and
the JVM: Go, Rust, R, Julia, Node.js, gfortran.

An uncaught error or panic of the program is python_exception ("any other application
exception"), its detail the error (the message line under a header that ends in ":"); the
runtime's own words for an allocation that failed are host_oom, for a missing package
import_error, for a native crash segfault; a missing file's errno words in the message are
file_not_found. Wordings written here from each runtime's documented format (the rule file cites
the sources), several per runtime, and benign mentions that must stay what they were. Pure logic
over small written logs."""

from __future__ import annotations

from pathlib import Path

import pytest
from classifylib import verdict


def goroutines(n: int = 1) -> str:
    return (f"\ngoroutine {n} [running]:\nmain.loadShards(...)\n\t/src/etl/shards.go:41\n"
            "main.main()\n\t/src/etl/main.go:17 +0x1d\nexit status 2\n")


def node_uncaught(err: str, site: str = "/srv/app/train.js:44") -> str:
    return (f"epoch 2\n{site}\n    const cfg = JSON.parse(raw);\n                     ^\n\n{err}\n"
            "    at JSON.parse (<anonymous>)\n    at main (/srv/app/train.js:44:22)\n\n"
            "Node.js v20.11.1\n")


# ---- Go ----

@pytest.mark.parametrize("line", [
    "panic: runtime error: index out of range [7] with length 4",
    "panic: runtime error: slice bounds out of range [:12] with capacity 8",
    "panic: shard manifest has 0 entries",
    "panic: runtime error: integer divide by zero",
    "panic: interface conversion: interface {} is string, not float64",
    "panic: assignment to entry in nil map",
    "panic: tokenizer: vocab size mismatch [recovered]",
])
def test_go_panic_is_the_programs_exception(tmp_path: Path, line: str) -> None:
    v = verdict(tmp_path, "reading 12 shards\n" + line + "\n" + goroutines(), exit_code=2)
    assert (v.cls, v.detail) == ("python_exception", line), (v.cls, v.detail)


def test_go_nil_dereference_is_a_panic_not_a_native_crash(tmp_path: Path) -> None:
    text = ("panic: runtime error: invalid memory address or nil pointer dereference\n"
            "[signal SIGSEGV: segmentation violation code=0x1 addr=0x18 pc=0x47b2e6]\n"
            + goroutines(7))
    v = verdict(tmp_path, text, exit_code=2)
    assert v.cls == "python_exception" and "nil pointer" in v.detail, (v.cls, v.detail)


@pytest.mark.parametrize("line", [
    "fatal error: all goroutines are asleep - deadlock!",
    "fatal error: concurrent map writes",
    "fatal error: concurrent map read and map write",
    "fatal error: stack overflow",
])
def test_go_throw_of_a_program_bug(tmp_path: Path, line: str) -> None:
    v = verdict(tmp_path, "workers started\n" + line + "\n" + goroutines(18), exit_code=2)
    assert v.cls == "python_exception" and v.detail == line, (v.cls, v.detail)


@pytest.mark.parametrize("text", [
    "runtime: out of memory: cannot allocate 4294967296-byte block (8592031744 in use)\n"
    "fatal error: out of memory\n",
    "fatal error: runtime: out of memory\n\nruntime stack:\nruntime.throw({0x4a1e2b, 0x16})\n",
    "fatal error: runtime: cannot allocate memory\n",
])
def test_go_out_of_memory_is_host_memory(tmp_path: Path, text: str) -> None:
    v = verdict(tmp_path, "building index\n" + text + goroutines(), exit_code=2)
    assert v.cls == "host_oom", (v.cls, v.detail)


@pytest.mark.parametrize("text", [
    "fatal error: unexpected signal during runtime execution\n"
    "[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x7f3a2c1b4e20]\n",
    "SIGSEGV: segmentation violation\nPC=0x7f1d3a6c2b10 m=0 sigcode=1\nsignal arrived during "
    "cgo execution\n",
    "SIGBUS: bus error\nPC=0x46c1e0 m=3 sigcode=2\n",
])
def test_go_native_crash_is_segfault(tmp_path: Path, text: str) -> None:
    v = verdict(tmp_path, "calling libfeat\n" + text + goroutines(), exit_code=2)
    assert v.cls == "segfault", (v.cls, v.detail)


@pytest.mark.parametrize("line,cls", [
    ("panic: open /data/prep/shards.json: no such file or directory", "file_not_found"),
    ("2025/03/02 11:40:07 stat /scratch/u/ckpt: no such file or directory", "file_not_found"),
    ("panic: mkdir /out/run3: permission denied", "permission_denied"),
    ("2025/03/02 11:40:07 open /data/private/keys.txt: permission denied", "permission_denied"),
])
def test_go_path_errors_in_lower_case(tmp_path: Path, line: str, cls: str) -> None:
    # os.PathError's "<op> <path>: <errno text>" (lower case, unlike C's strerror)
    v = verdict(tmp_path, "prep: starting\n" + line + "\n" + goroutines(), exit_code=2)
    assert v.cls == cls, (v.cls, v.detail)


def test_go_runtime_cannot_reserve_its_heap_at_start(tmp_path: Path) -> None:
    text = "fatal error: failed to reserve page summary memory\n\nruntime stack:\n"
    assert verdict(tmp_path, text, exit_code=2).cls == "host_oom"


# ---- Rust ----

@pytest.mark.parametrize("head,msg", [
    ("thread 'main' panicked at src/bin/prep.rs:88:41:",
     "called `Result::unwrap()` on an `Err` value: ParseIntError { kind: InvalidDigit }"),
    ("thread 'loader-3' panicked at /root/.cargo/registry/src/index/arrow-50.0.0/src/array.rs:"
     "211:9:", "index out of bounds: the len is 16 but the index is 16"),
    ("thread 'main' (48211) panicked at crates/tok/src/lib.rs:12:5:",
     "assertion `left == right` failed: vocab mismatch"),
    ("thread '<unnamed>' panicked at src/worker.rs:30:18:", "attempt to subtract with overflow"),
])
def test_rust_panic_detail_is_the_message_under_it(tmp_path: Path, head: str, msg: str) -> None:
    text = (f"epoch 1\n{head}\n{msg}\nnote: run with `RUST_BACKTRACE=1` environment variable "
            "to display a backtrace\n")
    v = verdict(tmp_path, text, exit_code=101)
    assert v.cls == "python_exception" and msg in v.detail and head in v.detail, (v.cls, v.detail)


def test_rust_panic_old_format_message_on_the_line(tmp_path: Path) -> None:
    line = ("thread 'main' panicked at 'called `Option::unwrap()` on a `None` value', "
            "src/main.rs:14:31")
    v = verdict(tmp_path, line + "\nnote: run with `RUST_BACKTRACE=1` environment variable to "
                "display a backtrace\n", exit_code=101)
    assert v.cls == "python_exception" and v.detail == line, (v.cls, v.detail)


def test_rust_unwrap_of_a_missing_file_is_file_not_found(tmp_path: Path) -> None:
    text = ("thread 'main' panicked at src/main.rs:9:44:\ncalled `Result::unwrap()` on an `Err` "
            'value: Os { code: 2, kind: NotFound, message: "No such file or directory" }\n')
    assert verdict(tmp_path, text, exit_code=101).cls == "file_not_found"


@pytest.mark.parametrize("sig,code", [(6, None), (None, 134)])
def test_rust_allocation_failure_is_host_memory(tmp_path: Path, sig, code) -> None:
    v = verdict(tmp_path, "loading embeddings\nmemory allocation of 34359738368 bytes failed\n",
                exit_code=code, signal=sig)
    assert v.cls == "host_oom", (v.cls, v.detail)


# ---- R ----

def test_r_error_message_on_the_next_line(tmp_path: Path) -> None:
    text = ("[1] \"fitting model\"\nError in solve.default(crossprod(X)) : \n"
            "  system is computationally singular: reciprocal condition number = 1.2e-19\n"
            "Calls: fit_glm -> solve -> solve.default\nExecution halted\n")
    v = verdict(tmp_path, text)
    assert v.cls == "python_exception", (v.cls, v.detail)
    assert v.detail.startswith("Error in solve.default(crossprod(X)) :")
    assert "computationally singular" in v.detail


@pytest.mark.parametrize("text", [
    "Error in eval(predvars, data, env) : object 'age_std' not found\nCalls: lm -> eval\n"
    "Execution halted\n",
    "Error in `mutate()`:\n! In argument: `z = log(x)`.\nCaused by error:\n! non-numeric argument"
    "\nBacktrace:\n  1. dplyr::mutate(df, z = log(x))\nExecution halted\n",
    "Error: expected 3 folds, got 2\nExecution halted\n",
])
def test_r_uncaught_errors(tmp_path: Path, text: str) -> None:
    v = verdict(tmp_path, "loading data\n" + text)
    assert v.cls == "python_exception" and v.confidence >= 0.6, (v.cls, v.confidence, v.detail)


@pytest.mark.parametrize("line", [
    "Error in library(xgboost) : there is no package called ‘xgboost’",
    "Error in loadNamespace(x) : there is no package called 'data.table'",
    "Error: package or namespace load failed for ‘sf’:",
])
def test_r_missing_package_is_import_error(tmp_path: Path, line: str) -> None:
    assert verdict(tmp_path, line + "\nExecution halted\n").cls == "import_error"


@pytest.mark.parametrize("line", [
    "Error: cannot allocate vector of size 11.2 Gb",
    "Error in matrix(0, n, n) : cannot allocate vector of size 745.1 Mb",
    "Error: vector memory exhausted (limit reached?)",
])
def test_r_allocation_failure_is_host_memory(tmp_path: Path, line: str) -> None:
    assert verdict(tmp_path, line + "\nExecution halted\n").cls == "host_oom"


def test_r_missing_file_is_file_not_found(tmp_path: Path) -> None:
    text = ("Error in file(file, \"rt\") : cannot open the connection\nCalls: read.csv -> "
            "read.table -> file\nIn addition: Warning message:\nIn file(file, \"rt\") :\n"
            "  cannot open file '/data/cohort/visits.csv': No such file or directory\n"
            "Execution halted\n")
    assert verdict(tmp_path, text).cls == "file_not_found"


def test_r_caught_segfault(tmp_path: Path) -> None:
    text = ("\n *** caught segfault ***\naddress 0x10, cause 'memory not mapped'\n\nTraceback:\n"
            " 1: .Call(\"fit_cpp\", X, y)\nAn irrecoverable exception occurred. R is aborting "
            "now ...\n")
    assert verdict(tmp_path, text, exit_code=None, signal=11).cls == "segfault"


# ---- Julia ----

@pytest.mark.parametrize("line", [
    "ERROR: LoadError: DimensionMismatch: matrix A has dimensions (64,128), vector B has "
    "length 64",
    "ERROR: LoadError: MethodError: no method matching train!(::Chain, ::Nothing)",
    "ERROR: LoadError: UndefVarError: `optimiser` not defined",
    "ERROR: LoadError: expected 3 input channels, got 4",
    "ERROR: KeyError: key \"lr\" not found",
])
def test_julia_uncaught_error(tmp_path: Path, line: str) -> None:
    text = (f"{line}\nStacktrace:\n [1] top-level scope\n   @ /home/u/fit.jl:31\n"
            "in expression starting at /home/u/fit.jl:31\n")
    v = verdict(tmp_path, text)
    assert (v.cls, v.detail) == ("python_exception", line), (v.cls, v.detail)


@pytest.mark.parametrize("text,cls", [
    ("ERROR: LoadError: OutOfMemoryError()\nStacktrace:\n [1] Array\n", "host_oom"),
    ("ERROR: LoadError: TaskFailedException\n\n    nested task error: OutOfMemoryError()\n",
     "host_oom"),
    ("ERROR: LoadError: ArgumentError: Package Flux not found in current path.\n- Run `import "
     "Pkg; Pkg.add(\"Flux\")` to install the Flux package.\n", "import_error"),
    ("ERROR: LoadError: ArgumentError: Package CSV [336ed68f-0bac-5ca0-87d4-7b16caf5d00b] is "
     "required but does not seem to be installed:\n - Run `Pkg.instantiate()` to install all "
     "recorded dependencies.\n", "import_error"),
    ("ERROR: LoadError: SystemError: opening file \"/scratch/u/grid.nc\": No such file or "
     "directory\n", "file_not_found"),
    ("\n[20411] signal (11.1): Segmentation fault\nin expression starting at /home/u/run.jl:9\n",
     "segfault"),
    ("\n[3118] signal 11 (1): Segmentation fault\nin expression starting at /home/u/run.jl:9\n",
     "segfault"),
    ("\nsignal (7): Bus error\nin expression starting at /home/u/run.jl:9\n", "segfault"),
])
def test_julia_specific_classes(tmp_path: Path, text: str, cls: str) -> None:
    v = verdict(tmp_path, text + "in expression starting at /home/u/run.jl:9\n")
    assert v.cls == cls, (v.cls, v.detail)


# ---- Node.js ----

@pytest.mark.parametrize("err", [
    "SyntaxError: Unexpected token } in JSON at position 211",
    "Error: unknown optimizer 'lamb'",
    "TypeError [ERR_INVALID_ARG_TYPE]: The \"path\" argument must be of type string. Received "
    "undefined",
    "RangeError: Invalid array length",
])
def test_node_uncaught_error(tmp_path: Path, err: str) -> None:
    v = verdict(tmp_path, node_uncaught(err))
    assert v.cls == "python_exception" and v.confidence >= 0.6 and err.split(":")[0] in v.detail, (
        v.cls, v.confidence, v.detail)


@pytest.mark.parametrize("text,cls", [
    (node_uncaught("Error: Cannot find module 'onnxruntime-node'\nRequire stack:\n- /srv/app/"
                   "infer.js", "node:internal/modules/cjs/loader:1147"), "import_error"),
    (node_uncaught("Error [ERR_MODULE_NOT_FOUND]: Cannot find package '@tensorflow/tfjs-node' "
                   "imported from /srv/app/infer.mjs", "node:internal/modules/esm/resolve:854"),
     "import_error"),
    (node_uncaught("Error: ENOENT: no such file or directory, open '/data/labels.json'",
                   "node:fs:453"), "file_not_found"),
    ("<--- Last few GCs --->\n\n[311:0x5f2e]  81233 ms: Mark-Compact 4041.2 (4130.5) -> 4039.8 "
     "(4131.2) MB\n\nFATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of "
     "memory\n 1: 0xb85bc0 node::Abort() [node]\n", "host_oom"),
    ("FATAL ERROR: Ineffective mark-compacts near heap limit Allocation failed - JavaScript heap "
     "out of memory\n", "host_oom"),
])
def test_node_specific_classes(tmp_path: Path, text: str, cls: str) -> None:
    v = verdict(tmp_path, text, exit_code=None if cls == "host_oom" else 1,
                signal=6 if cls == "host_oom" else None)
    assert v.cls == cls, (v.cls, v.detail)


# ---- gfortran ----

@pytest.mark.parametrize("line", [
    "Fortran runtime error: Index '101' of dimension 1 of array 'u' above upper bound of 100",
    "Fortran runtime error: Bad integer for item 2 in list input",
    "Fortran runtime error: End of file",
])
def test_fortran_runtime_error(tmp_path: Path, line: str) -> None:
    text = (f" step 40\nAt line 57 of file solver.f90 (unit = 10, file = 'mesh.dat')\n{line}\n\n"
            "Error termination. Backtrace:\n#0  0x7f2c1 in solve_\n")
    v = verdict(tmp_path, text, exit_code=2)
    assert (v.cls, v.detail) == ("python_exception", line), (v.cls, v.detail)


def test_fortran_error_stop(tmp_path: Path) -> None:
    v = verdict(tmp_path, " residual   3.1E+12\nERROR STOP 'solver diverged'\n", exit_code=1)
    assert v.cls == "python_exception", (v.cls, v.detail)


@pytest.mark.parametrize("text,cls", [
    ("At line 12 of file io.f90 (unit = 20)\nFortran runtime error: Cannot open file "
     "'restart_0040.bin': No such file or directory\n", "file_not_found"),
    ("Operating system error: Cannot allocate memory\nAllocation would exceed memory limit\n",
     "host_oom"),
    ("\nProgram received signal SIGSEGV: Segmentation fault - invalid memory reference.\n\n"
     "Backtrace for this error:\n#0  0x7f8a in ???\n", "segfault"),
    ("\nProgram received signal SIGFPE: Floating-point exception - erroneous arithmetic "
     "operation.\n\nBacktrace for this error:\n", "segfault"),
])
def test_fortran_specific_classes(tmp_path: Path, text: str, cls: str) -> None:
    v = verdict(tmp_path, text, exit_code=None if cls == "segfault" else 2,
                signal=11 if cls == "segfault" else None)
    assert v.cls == cls, (v.cls, v.detail)


# ---- benign mentions stay what they were ----

@pytest.mark.parametrize("text", [
    # a Go service logging a recovered panic and finishing
    "handler: recovered from panic: runtime error: index out of range\nshutdown complete\n",
    # R warnings with the script going on to the end
    "Warning message:\nIn log(x) : NaNs produced\n[1] \"model saved to fit.rds\"\n",
    # a Node script that caught its error and printed it
    "load failed: Error: ENOENT: retrying with defaults\ndone, 40 files written\n",
    # Julia's @warn and a handled exception
    "┌ Warning: learning rate looks large\n└ @ Main /home/u/fit.jl:12\ntraining finished\n",
])
def test_benign_mentions_on_a_successful_run_stay_success(tmp_path: Path, text: str) -> None:
    assert verdict(tmp_path, text, exit_code=0).cls == "success"


def test_words_in_prose_are_not_runtime_errors(tmp_path: Path) -> None:
    # the words inside a sentence, not at a line's start: nothing recognisable
    text = ("note: do not panic: the retry will fix it\nthe thread 'main' is fine\n"
            "we saw Error in the logs yesterday : resolved\n")
    v = verdict(tmp_path, text)
    assert v.cls == "unknown", (v.cls, v.detail)


@pytest.mark.parametrize("eol,prefix", [("\r\n", ""), ("\n", "3: "), ("\n", "[rank1]: ")])
def test_message_on_the_next_line_through_line_shapes(tmp_path: Path, eol: str,
                                                      prefix: str) -> None:
    # a CRLF log, srun's --label and torch's rank prefix: the next line is read as the rules
    # read lines
    lines = ["epoch 3", "thread 'main' panicked at src/shard.rs:40:13:",
             "shard 9 has 0 rows", "note: run with `RUST_BACKTRACE=1` environment variable"]
    v = verdict(tmp_path, "".join(prefix + x + eol for x in lines), exit_code=101)
    assert v.cls == "python_exception" and v.detail.endswith(": shard 9 has 0 rows"), v.detail
