"""The family of classify/rules/70-jvm-make-config.yaml: programs that are not Python (the JVM: its
OutOfMemoryError is host memory, not the GPU's; missing classes and native libraries; serialized
objects that do not read; java.nio's path errors; "Caused by:" chains whose last cause decides),
build tools (GNU make's "No rule to make target") and config frameworks (Hydra's short error
report and missing-config wordings, omegaconf's exception classes whose names do not end in
Error). torch's own OutOfMemoryError stays GPU memory. Pure logic over small written logs."""

from __future__ import annotations

from pathlib import Path

import pytest
from classifylib import SITE, verdict


def jframes(n: int, cls: str = "org.example.etl.Stage") -> str:
    short = cls.rsplit(".", 1)[-1]
    return "".join(f"\tat {cls}{i}.run({short}{i}.java:{40 + i})\n" for i in range(n))


def uncaught(exc: str, thread: str = "main", n: int = 3) -> str:
    return f'epoch 1 batch 20\nException in thread "{thread}" {exc}\n' + jframes(n)


HYDRA_TAIL = "\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n"


# ---- JVM: OutOfMemoryError is host memory, every kind of it ----

@pytest.mark.parametrize("exc", [
    "java.lang.OutOfMemoryError: GC overhead limit exceeded",
    "java.lang.OutOfMemoryError: Metaspace",
    "java.lang.OutOfMemoryError: Compressed class space",
    "java.lang.OutOfMemoryError: Cannot reserve 8388608 bytes of direct buffer memory"
    " (allocated: 266338304, limit: 268435456)",
    "java.lang.OutOfMemoryError: Direct buffer memory",
    "java.lang.OutOfMemoryError: unable to create native thread: possibly out of memory or"
    " process/resource limits reached",
    "java.lang.OutOfMemoryError: Requested array size exceeds VM limit",
])
def test_jvm_out_of_memory_is_host_memory(tmp_path: Path, exc: str) -> None:
    v = verdict(tmp_path, uncaught(exc, thread="pool-3-thread-1"))
    assert v.cls == "host_oom", (exc, v.cls, v.detail)


def test_jvm_out_of_memory_as_the_last_cause_of_a_long_chain(tmp_path: Path) -> None:
    text = (uncaught("java.lang.IllegalStateException: embedding table init failed", n=25)
            + "Caused by: java.lang.OutOfMemoryError: Java heap space\n" + jframes(12)
            + "\t... 25 more\n")
    assert verdict(tmp_path, text).cls == "host_oom"


def test_jvm_vm_cannot_start_for_lack_of_memory(tmp_path: Path) -> None:
    text = ("#\n# There is insufficient memory for the Java Runtime Environment to continue.\n"
            "# Native memory allocation (mmap) failed to map 4294967296 bytes for committing"
            " reserved memory.\n")
    assert verdict(tmp_path, text).cls == "host_oom"


def test_torch_out_of_memory_error_stays_gpu_memory(tmp_path: Path) -> None:
    text = ("Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n"
            "    loss.backward()\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate"
            " 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB\n")
    assert verdict(tmp_path, text).cls == "cuda_oom"


# ---- JVM: an uncaught exception is the program raising; the last cause decides ----

@pytest.mark.parametrize("exc", [
    "java.lang.IllegalArgumentException: learning rate must be positive: -0.01",
    "java.lang.ArrayIndexOutOfBoundsException: Index 128 out of bounds for length 128",
    "java.util.ConcurrentModificationException",
    "com.example.pipeline.SchemaMismatchException: column 'label' has type STRING, expected INT",
])
def test_jvm_uncaught_exception_is_the_program_raising(tmp_path: Path, exc: str) -> None:
    v = verdict(tmp_path, uncaught(exc, thread="Thread-7"))
    assert v.cls == "python_exception", (exc, v.cls)
    assert exc.split(":")[0].rsplit(".", 1)[-1] in v.detail


def test_jvm_cause_chain_deeper_than_an_incident(tmp_path: Path) -> None:
    text = (uncaught("java.lang.RuntimeException: job failed", n=20)
            + "Caused by: java.util.concurrent.ExecutionException: loader failed\n" + jframes(15)
            + "\t... 20 more\n"
            + "Caused by: java.nio.file.NoSuchFileException: /scratch/u/shards/part-00017.bin\n"
            + jframes(9) + "\t... 35 more\n")
    v = verdict(tmp_path, text)
    assert v.cls == "file_not_found", (v.cls, v.detail)


def test_jvm_cause_chain_generic_last_cause_keeps_specific_one(tmp_path: Path) -> None:
    text = (uncaught("java.io.FileNotFoundException: /etc/etl/job.properties (Permission denied)",
                     n=20)
            + "Caused by: java.lang.IllegalStateException: wrapped\n" + jframes(4))
    assert verdict(tmp_path, text).cls == "permission_denied"


# ---- JVM: missing classes, unreadable serialized models, java.nio's path errors ----

@pytest.mark.parametrize("text", [
    "Error: Unable to initialize main class org.example.Train\n"
    "Caused by: java.lang.NoClassDefFoundError: org/apache/commons/math3/linear/RealMatrix\n",
    uncaught("java.lang.ClassNotFoundException: org.example.models.GbdtScorer"),
    uncaught("java.lang.UnsatisfiedLinkError: no xgboost4j in java.library.path:"
             " /usr/java/packages/lib:/usr/lib64"),
])
def test_jvm_missing_class_or_native_library_is_import_error(tmp_path: Path, text: str) -> None:
    assert verdict(tmp_path, text).cls == "import_error"


@pytest.mark.parametrize("text", [
    uncaught("java.io.StreamCorruptedException: invalid type code: 00")
    + "\tat java.base/java.io.ObjectInputStream.readObject0(ObjectInputStream.java:1770)\n",
    'Exception in thread "main" java.io.EOFException\n'
    "\tat java.base/java.io.ObjectInputStream$BlockDataInputStream.readShort("
    "ObjectInputStream.java:3338)\n"
    "\tat java.base/java.io.ObjectInputStream.readStreamHeader(ObjectInputStream.java:957)\n"
    "\tat org.example.Serve.load(Serve.java:31)\n",
])
def test_jvm_unreadable_object_stream_is_checkpoint_corrupt(tmp_path: Path, text: str) -> None:
    assert verdict(tmp_path, text).cls == "checkpoint_corrupt"


def test_jvm_eof_outside_an_object_stream_is_only_raised(tmp_path: Path) -> None:
    text = ('Exception in thread "grpc-reader" java.io.EOFException\n'
            "\tat java.base/java.io.DataInputStream.readInt(DataInputStream.java:398)\n"
            "\tat org.example.rpc.Frames.next(Frames.java:77)\n")
    assert verdict(tmp_path, text).cls == "python_exception"


@pytest.mark.parametrize("exc,cls", [
    ("java.nio.file.NoSuchFileException: /data/parquet/_SUCCESS", "file_not_found"),
    ("java.nio.file.AccessDeniedException: /shared/models/ranker-v9", "permission_denied"),
])
def test_jvm_nio_path_errors(tmp_path: Path, exc: str, cls: str) -> None:
    assert verdict(tmp_path, uncaught(exc)).cls == cls


def test_jvm_exception_printed_by_a_job_that_went_on_is_success(tmp_path: Path) -> None:
    text = (uncaught("java.lang.OutOfMemoryError: Java heap space", thread="prefetch-2")
            + "prefetcher restarted with a smaller queue\nepoch 3 done\n")
    assert verdict(tmp_path, text, exit_code=0).cls == "success"


# ---- Hydra's short report, its missing configs; omegaconf's exception classes ----

@pytest.mark.parametrize("report", [
    "Could not append to config. An item is already at 'optimizer.lr'.",
    "Error merging override model.layers=twelve\nValue 'twelve' of type 'str' could not be"
    " converted to Integer\n    full_key: model.layers\n    object_type=ModelConf",
    "mismatched input '=' expecting <EOF>\nSee https://hydra.cc/docs/1.2/advanced/"
    "override_grammar/basic for details",
    "Multiple values for data. To override a value use 'override data: imagenet'",
])
def test_hydra_short_report_is_the_program_raising(tmp_path: Path, report: str) -> None:
    v = verdict(tmp_path, "launching sweep 3\n" + report + "\n" + HYDRA_TAIL)
    assert v.cls == "python_exception", (report, v.cls)


@pytest.mark.parametrize("report", [
    "In 'train': Could not find 'model/vit_h14'\n\nAvailable options in 'model':\n\tresnet50\n"
    "\tvit_b16\nConfig search path:\n\tprovider=hydra, path=pkg://hydra.conf",
    "In 'experiment/big': Could not load 'data/laion_400m'.\nConfig search path:\n"
    "\tprovider=main, path=file:///home/u/proj/conf",
    "Primary config directory not found.\nCheck that the config directory"
    " '/home/u/proj/configs' exists and readable",
])
def test_hydra_missing_config_is_file_not_found(tmp_path: Path, report: str) -> None:
    v = verdict(tmp_path, report + "\n" + HYDRA_TAIL)
    assert v.cls == "file_not_found", (report, v.cls)


def test_hydra_report_with_a_known_exception_line_keeps_its_class(tmp_path: Path) -> None:
    text = ("Error executing job with overrides: ['data.root=/scratch/x']\n"
            "Traceback (most recent call last):\n"
            "  File \"/home/u/proj/train.py\", line 30, in main\n"
            "    ds = load(cfg.data.root)\nFileNotFoundError: [Errno 2] No such file or directory:"
            " '/scratch/x/train.idx'\n" + HYDRA_TAIL)
    assert verdict(tmp_path, text).cls == "file_not_found"


@pytest.mark.parametrize("exc", [
    "omegaconf.errors.MissingMandatoryValue: Missing mandatory value: trainer.devices",
    "hydra.errors.InstantiationException: Error in call to target 'torch.optim.AdamW':",
    "requests.exceptions.InvalidURL: Failed to parse: http://[::1",
])
def test_exception_class_from_an_errors_module(tmp_path: Path, exc: str) -> None:
    text = ("Traceback (most recent call last):\n"
            f'  File "{SITE}/omegaconf/dictconfig.py", line 359, in __getattr__\n'
            "    self._format_and_raise(key=key, value=None, cause=e)\n" + exc + "\n")
    v = verdict(tmp_path, text)
    assert v.cls == "python_exception", (exc, v.cls)


def test_errors_module_line_without_a_traceback_is_no_exception(tmp_path: Path) -> None:
    # a program logging the class it handled, no traceback before it: not its end
    text = ("omegaconf.errors.MissingMandatoryValue: lr unset, using the schedule's default\n"
            "epoch 2 done\n")
    assert verdict(tmp_path, text).cls == "unknown"


# ---- GNU make ----

@pytest.mark.parametrize("line,cls", [
    ("make[2]: *** No rule to make target 'shards/train-0003.tar', needed by 'index.json'.  Stop.",
     "file_not_found"),
    ("gmake: *** No rule to make target `../data/vocab.txt', needed by `tok.bin'.  Stop.",
     "file_not_found"),
    ("make: *** No targets specified and no makefile found.  Stop.", "file_not_found"),
    ("make: *** No rule to make target 'evalute'.  Stop.", "python_exception"),
])
def test_make_no_rule(tmp_path: Path, line: str, cls: str) -> None:
    v = verdict(tmp_path, "make: Entering directory '/home/u/proj'\n" + line + "\n", exit_code=2)
    assert v.cls == cls, (line, v.cls)
