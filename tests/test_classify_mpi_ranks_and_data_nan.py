"""Where and what for the weaknesses held-out set 6 showed (corpus/holdout6/misses-once.txt):
an MPI launcher's line names the rank that failed first (Open MPI's mpirun, MPICH's Hydra),
read like torchrun's Root Cause block and srun's task lines, when one Slurm task runs mpirun
for every rank; NaN in the input data (scikit-learn's / pandas' validation) is a data error,
not a training that diverged, and a zero count of NaNs is no alarm. Pure logic over small
written logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpualert_slurm.classify import JobFacts, TaskInput, classify


def task(tmp_path: Path, text: str, exit_code: int | None = 1, **kw) -> TaskInput:
    log = tmp_path / "run.0.log"
    log.write_text(text)
    return TaskInput(str(log), rank=0, step="run", exit_code=exit_code, **kw)


def verdict(tmp_path: Path, text: str, exit_code: int | None = 1, **kw):
    return classify([task(tmp_path, text, exit_code)], JobFacts(exit_code=exit_code, **kw))


SWEEPS = "".join(f"(r{r}) sweep {i} residual {0.5 ** i:.3e}\n" for i in range(4) for r in range(4))
BAR = "-" * 74 + "\n"
PRIMARY = (BAR + "Primary job  terminated normally, but 1 process returned\n"
           "a non-zero exit code. Per user-direction, the job has been aborted.\n" + BAR)


# ---- 1. the MPI launcher names the failing rank ----

@pytest.mark.parametrize("text, cls, rank, node", [
    (PRIMARY + BAR + "mpirun noticed that process rank 3 with PID 81234 on node gpu-b07 exited on "
     "signal 7 (Bus error).\n" + BAR, "segfault", 3, "gpu-b07"),
    (PRIMARY + BAR + "mpiexec noticed that process rank 2 with PID 0 on node n12 exited on signal "
     "11.\n" + BAR, "segfault", 2, None),
    (PRIMARY + BAR + "prterun detected that one or more processes exited with non-zero status, "
     "thus causing\nthe job to be terminated. The first process to do so was:\n\n"
     "   Process name: [prterun-login1-5512@1,2]\n   Exit code:    7\n" + BAR, "unknown", 2, None),
    (BAR + "mpirun has exited due to process rank 5 with PID 4411 on\nnode c3 calling \"abort\". "
     "This may have caused other processes\nin the application to be terminated by signals "
     "sent by mpirun\n(as reported here).\n" + BAR, "unknown", 5, None),
    (PRIMARY + "mpirun noticed that process rank 1 with PID 77 on node a17 exited on signal 15 "
     "(Terminated).\n", "unknown", 1, None),
    ("=" * 83 + "\n=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
     "=   RANK 6 PID 30917 RUNNING AT gpu-n04\n=   KILLED BY SIGNAL: 11 (Segmentation fault)\n"
     + "=" * 83 + "\n", "segfault", 6, None),
    ("=" * 83 + "\n=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
     "=   PID 30917 RUNNING AT gpu-n04\n=   EXIT CODE: 139\n=   CLEANING UP REMAINING PROCESSES\n",
     "segfault", None, None),
])
def test_mpi_launcher_names_the_failed_rank(tmp_path, text, cls, rank, node):
    v = verdict(tmp_path, SWEEPS + text, exit_code=1)
    assert v.cls == cls, (v.cls, v.detail)
    assert v.root_rank == (0 if rank is None else rank), v.root_rank
    if node:
        assert v.root_node == node


def test_process_name_needs_mpiruns_headline(tmp_path):
    """A "Process name:" line of another report (a lost communication path) is no claim that
    that rank failed first: the Slurm task stays the root."""
    text = SWEEPS + "A critical communication path was lost to:\n\n  My name:      [[9,1],0]\n" \
        "  Process name: [[9,1],3]\n  Node:         n4\n"
    v = verdict(tmp_path, text, exit_code=1)
    assert v.root_rank != 3


# ---- 2. NaN in the input data is a data error; a zero count of NaNs is no alarm ----

FIT_TB = ('Traceback (most recent call last):\n  File "/srv/fit.py", line 40, in <module>\n'
          '    model.fit(features, target)\n  File "/venv/lib/python3.11/site-packages/sklearn/'
          'utils/validation.py", line 186, in _assert_all_finite_element_wise\n'
          '    raise ValueError(msg_err)\n')


@pytest.mark.parametrize("last", [
    "ValueError: Input y contains NaN.",
    "ValueError: Input sample_weight contains infinity or a value too large for "
    "dtype('float32').",
    "ValueError: Input contains NaN, infinity or a value too large for dtype('float64').",
    "pandas.errors.IntCastingNaNError: Cannot convert non-finite values (NA or inf) to integer. "
    "Replace or remove non-finite values or cast to an integer type that supports these values",
    "ValueError: cannot convert float NaN to integer",
    "ValueError: Cannot mask with non-boolean array containing NA / NaN values",
])
def test_nan_in_input_data_is_a_data_error(tmp_path, last):
    v = verdict(tmp_path, "loaded 50000 rows\n" + FIT_TB + last + "\n", exit_code=1)
    assert v.cls == "python_exception", (v.cls, v.detail)


def test_estimator_refusing_nan_is_a_data_error(tmp_path):
    text = (FIT_TB + "ValueError: Input X contains NaN.\nRidge does not accept missing values "
            "encoded as NaN natively. For supervised learning, you might want to consider ...\n")
    v = verdict(tmp_path, text, exit_code=1)
    assert (v.cls, v.detail) == ("python_exception", "ValueError")


@pytest.mark.parametrize("line", [
    "step {i} grad guard: 0 non-finite values in 3.1M params",
    "step {i}: found 0 NaN in activations, 0 Inf in logits",
    "step {i} nan: 0 inf: 0 loss 0.41",
    "step {i} NaN/Inf: 0 (checked 12 tensors)",
    "step {i} zero NaNs in the gradients",
    "step {i} non-finite=0 loss=0.52",
])
def test_zero_counts_of_nan_stay_a_success(tmp_path, line):
    text = "".join(line.format(i=i) + "\n" for i in range(5)) + "done, checkpoint saved\n"
    v = verdict(tmp_path, text, exit_code=0)
    assert v.cls == "success", (v.cls, v.detail)


@pytest.mark.parametrize("text", [
    "step 90 loss 0.3\nstep 100: 12 non-finite values in the gradients, stopping\n",
    "RuntimeError: Function 'SqrtBackward0' returned nan values in its 0th output.\n",
    "epoch 3: loss is nan\n",
    "tensorflow.python.framework.errors_impl.InvalidArgumentError: logits : Tensor had NaN "
    "values [Op:CheckNumerics]\n",
])
def test_the_trainings_own_nan_stays_divergence(tmp_path, text):
    v = verdict(tmp_path, "epoch 1 loss 0.9\n" + text, exit_code=1)
    assert v.cls == "nan_divergence", (v.cls, v.detail)
