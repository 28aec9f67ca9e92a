"""The family of classify/rules/50-numerics.yaml: NaN / Inf loss and gradients. "Not finite"
wordings, a non-finite grad norm or metric that ends an exit-0 run (a silent failure), a NaN
step the loop skipped (recovered, or skipped to the end), the training's own NaN beside a data
NaN; and the values that turned finite again, which are no divergence. Pure logic over small
written logs."""

from __future__ import annotations

from pathlib import Path

import pytest
from classifylib import (
    LOOP_PROGRESS,
    LOSSES,
    PREP_TB,
    STEPS,
    TRAINING,
    job_verdict,
    log_alone,
    run_py,
    task,
    verdict,
    write,
)

from gpualert_slurm.classify import (
    JobFacts,
    TaskInput,
    classify,
)

# ---- a non-finite grad norm ending an exit-0 run ----

def test_grad_norm_nan_at_the_end_of_an_exit0_run_is_a_silent_failure(tmp_path: Path) -> None:
    log = "".join(f"step {i} loss 0.{i} grad_norm 1.{i}\n" for i in range(60))
    log += ("{'loss': '0.51', 'grad_norm': 'nan', 'learning_rate': '1e-3'}\n"
            "grad_norm is nan at step 61, stopping training.\ndone\n")
    v = job_verdict([task(tmp_path, log, exit_code=0)])
    assert (v.cls, v.silent_failure) == ("nan_divergence", True)


def test_finite_grad_norms_and_an_early_nan_stay_success(tmp_path: Path) -> None:
    log = "step 0 grad_norm: nan (fp16 overflow, step skipped)\n"
    log += "".join(f"step {i} loss 0.{i} grad_norm: 1.{i}\n" for i in range(1, 80))
    v = job_verdict([task(tmp_path, log + "training finished\n", exit_code=0)])
    assert (v.cls, v.silent_failure) == ("success", False)


def test_a_nan_metric_that_stays_nan_is_divergence(tmp_path: Path) -> None:
    text = ("iter 100: loss: 1.91, grad_norm: nan\niter 200: loss: 0.91, grad_norm: nan\n"
            "iter 300: loss: nan, grad_norm: nan\n")
    assert verdict(tmp_path, text, exit_code=0).cls == "nan_divergence"


@pytest.mark.parametrize("line", [
    "step=400 loss=nan nan_steps=0",  # a real NaN beside a zero count is still a NaN
    "summary: NaN losses: 3",
    "FloatingPointError: Loss became infinite or NaN at iteration=0!",
])
def test_non_zero_or_real_nan_stays_divergence(tmp_path: Path, line: str) -> None:
    assert verdict(tmp_path, STEPS + line + "\n", exit_code=None).cls == "nan_divergence"


# ---- NaN said as "not finite" ----

@pytest.mark.parametrize("line", [
    "FloatingPointError: non-finite activations in block 3",
    "RuntimeError: validation loss is not finite at epoch 4",
    "ValueError: array must not contain infs or NaNs",
    "AssertionError: non-finite gradients in layer fc1",
])
def test_not_finite_wordings_are_divergence(tmp_path: Path, line: str) -> None:
    v = job_verdict([task(tmp_path, LOOP_PROGRESS + PREP_TB + line + "\n")])
    assert v.cls == "nan_divergence", v.to_json()


def test_no_non_finite_values_is_benign(tmp_path: Path) -> None:
    v = job_verdict([task(tmp_path, LOOP_PROGRESS + "check: no non-finite values found\n"
                      + LOOP_PROGRESS, exit_code=0)])
    assert v.cls == "success" and not v.silent_failure


# ---- a NaN step the loop skipped ----

def test_nan_skipped_then_recovered_is_success(tmp_path: Path) -> None:
    log = LOOP_PROGRESS + "iter 40: loss is nan, skipping this batch\n" + LOOP_PROGRESS + "done\n"
    v = job_verdict([task(tmp_path, log, exit_code=0)])
    assert v.cls == "success" and not v.silent_failure


def test_nan_skipped_to_the_end_is_silent_divergence(tmp_path: Path) -> None:
    skips = "".join(f"[{i}] loss=nan, skipping batch\n" for i in range(30, 60))
    v = job_verdict([task(tmp_path, LOOP_PROGRESS + skips + "epoch done\n", exit_code=0)])
    assert v.cls == "nan_divergence" and v.silent_failure
    assert "exited 0" in v.detail


def test_one_late_skip_is_not_a_run(tmp_path: Path) -> None:
    log = LOOP_PROGRESS + "step 11: grad norm is inf, skipping step\nsaved model\n"
    v = job_verdict([task(tmp_path, log, exit_code=0)])
    assert v.cls == "success"


def test_skipped_nan_then_a_crash_is_the_crash(tmp_path: Path) -> None:
    log = (LOOP_PROGRESS + "loss is nan, skipping batch\n" + LOOP_PROGRESS + PREP_TB
           + "KeyError: 'labels'\n")
    assert job_verdict([task(tmp_path, log)]).cls == "python_exception"


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


# ---- silent failures --------------------------------------------------------------------------

def test_nan_abort_with_exit_0_is_a_silent_failure(tmp_path):
    t = run_py(tmp_path, """
        import math, sys
        w = 1.0
        for step in range(1, 40):
            loss = w * w * w * w
            print(f"step {step} | loss = {loss:.4g}")
            if not math.isfinite(loss):
                print("NaN or Inf detected in loss, aborting.")
                sys.exit(0)
            w -= 3.5 * 4 * w * w * w
        """)
    assert t.exit_code == 0
    v = classify([t], JobFacts(exit_code=0))
    assert (v.cls, v.silent_failure) == ("nan_divergence", True)
    assert v.to_json()["silent_failure"] is True and "exited 0" in v.detail


@pytest.mark.parametrize("code", [
    # a metric column named nan_count, "0 errors"
    "for i in range(1, 200): print(f'step {i} loss {1/i:.3f} nan_count 0 inf_count 0')\n"
    "print('finished: 0 errors')",
    # one nan step, skipped and recovered, then long normal training
    "print('step 3 loss = nan, skipping step')\n"
    "for i in range(4, 200): print(f'step {i} loss = {1/i:.3f}')",
    "print('no NaN or Inf detected in gradients')",
])
def test_benign_nan_mentions_with_exit_0_stay_success(tmp_path, code):
    t = run_py(tmp_path, code)
    v = classify([t], JobFacts(exit_code=0))
    assert (v.cls, v.silent_failure) == ("success", False), v.detail


def test_nan_in_a_failed_job_is_not_flagged_silent(tmp_path):
    path = write(tmp_path, "0.0.log", LOSSES + "step 30 loss = nan\n")
    v = classify([TaskInput(path)], JobFacts(exit_code=1))
    assert (v.cls, v.silent_failure) == ("nan_divergence", False)


# ---- divergence shown only in a trainer's summary (was: success / unknown) ----

def test_eval_loss_nan_at_every_evaluation_is_divergence_even_on_exit_0(tmp_path: Path) -> None:
    text = ""
    for e in range(1, 4):
        text += (f"{{'loss': {0.0 if e > 1 else 1.93}, 'grad_norm': 0.0, 'learning_rate': "
                 f"{5e-5 - e * 1e-5:.1e}, 'epoch': {e - 0.5}}}\n"
                 f"{{'eval_loss': nan, 'eval_runtime': 12.31, 'eval_samples_per_second': 81.2, "
                 f"'eval_steps_per_second': 10.2, 'epoch': {float(e)}}}\n")
    text += ("{'train_runtime': 912.4, 'train_samples_per_second': 32.9, "
             "'train_steps_per_second': 4.1, 'train_loss': nan, 'epoch': 3.0}\n")
    assert verdict(tmp_path, text, exit_code=0).cls == "nan_divergence"
    assert log_alone(tmp_path, text) == "nan_divergence"


def test_lightning_progress_postfix_nan_is_divergence(tmp_path: Path) -> None:
    text = ("Epoch 3:  41%|####1     | 412/1000 [01:12<01:43, 5.68it/s, v_num=7, "
            "train_loss_step=nan.0]\n")
    assert log_alone(tmp_path, TRAINING + text) == "nan_divergence"


def test_fairseq_loss_scale_collapsing_is_divergence(tmp_path: Path) -> None:
    scale = 2.0
    text = ""
    while scale > 1e-4:
        scale /= 2
        text += f"| WARNING: overflow detected, setting loss scale to: {scale}\n"
    assert log_alone(tmp_path, TRAINING + text + "Traceback (most recent call last):\n") \
        == "nan_divergence"
    # a scale that dips and recovers is not divergence
    assert log_alone(tmp_path, TRAINING + "| WARNING: overflow detected, setting loss scale to: "
                 "64.0\n" + TRAINING) != "nan_divergence"
