"""Composed tuning-corpus cases (templates `f5_*`, ids `f5g-*`) for the GPU wording families
held-out set 5 showed unknown, where no CPU machine can cause the failure: libraries that turn a
CUDA OOM into their own message, Triton's resource errors, CUDA errors that mean the hardware
failed, torch's older device-check wordings. Each message follows its source's format (cited
per template and in corpus/README.md); the surroundings reuse kit.py's preamble and
traceback helpers and vary with the case id.
"""

from __future__ import annotations

import random
from pathlib import Path

from corpus.gen.compose.kit import SITE, _tb, catalogue, catalogued, compose, render

CATALOGUE = catalogue(__name__)


def _vllm_stamp(rng: random.Random) -> str:
    return (f"{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d} {rng.randrange(10, 24)}:"
            f"{rng.randrange(10, 60)}:{rng.randrange(10, 60)}")


def cuda_oom(rng: random.Random, p: dict) -> str:
    kind = p["kind"]
    if kind in CATALOGUE["cuda_oom"]:  # the message texts: catalogue/tuning_f5.yaml
        return render(CATALOGUE["cuda_oom"][kind], {**globals(), **locals()})
    if kind == "vllm_kv_needed":
        # vLLM v1 (v1/core/kv_cache_utils.py check_enough_kv_cache_memory), raised in the
        # EngineCore process whose log lines carry its "(EngineCore_DP0 pid=N)" prefix
        pid = rng.randrange(2000, 90000)
        need = rng.choice([16.0, 32.0, 12.5])
        have = round(need * rng.uniform(0.3, 0.8), 2)
        pre = f"(EngineCore_DP0 pid={pid}) "
        head = (f"{pre}INFO {_vllm_stamp(rng)} [gpu_model_runner.py:{rng.randrange(1800, 2400)}]"
                f" Model loading took {rng.uniform(14, 60):.4f} GiB and "
                f"{rng.uniform(5, 40):.6f} seconds\n"
                f"{pre}INFO {_vllm_stamp(rng)} [gpu_worker.py:{rng.randrange(200, 300)}] "
                f"Available KV cache memory: {have} GiB\n")
        lines = ["Traceback (most recent call last):",
                 f'  File "{SITE}/vllm/v1/engine/core.py", line {rng.randrange(600, 800)}, in '
                 "run_engine_core",
                 "    engine_core = EngineCoreProc(*args, **kwargs)",
                 f'  File "{SITE}/vllm/v1/core/kv_cache_utils.py", line '
                 f"{rng.randrange(600, 800)}, in check_enough_kv_cache_memory",
                 "    raise ValueError(",
                 f"ValueError: To serve at least one request with the models's max seq len "
                 f"(131072), ({need:.2f} GiB KV cache is needed, which is larger than the "
                 f"available KV cache memory ({have:.2f} GiB). Based on the available memory, "
                 f"the estimated maximum model length is {int(131072 * have / need)}. Try "
                 "increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
                 "initializing the engine."]
        return head + "".join(f"{pre}ERROR {_vllm_stamp(rng)} [core.py:{rng.randrange(600, 800)}]"
                              f" {ln}\n" for ln in lines)
    raise ValueError(kind)


cuda_error = catalogued(CATALOGUE["cuda_error"], globals())


gpu_hw = catalogued(CATALOGUE["gpu_hw"], globals())


devmm = catalogued(CATALOGUE["devmm"], globals())


cuda_setup = catalogued(CATALOGUE["cuda_setup"], globals())


def tf_placement(rng: random.Random, p: dict) -> str:
    # the GPU is there, the op has no GPU kernel: a program error, not the node's setup
    frames = [("/home/u/tf_img/pipeline.py", "<module>", "imgs = decode(batch)"),
              ("/home/u/tf_img/pipeline.py", "decode", "return tf.io.decode_jpeg(raw)")]
    return ("GPU devices: [PhysicalDevice(name='/physical_device:GPU:0', device_type='GPU')]\n"
            + _tb(rng, frames, "tensorflow.python.framework.errors_impl.InvalidArgumentError: "
                  "Could not satisfy device specification "
                  "'/job:localhost/replica:0/task:0/device:GPU:0'. enable_soft_placement=0. "
                  "Supported device types [CPU]. All available devices "
                  "[/job:localhost/replica:0/task:0/device:CPU:0, "
                  "/job:localhost/replica:0/task:0/device:GPU:0]. [Op:DecodeJpeg]"))


TEMPLATES = {"f5_cuda_oom": cuda_oom, "f5_cuda_error": cuda_error, "f5_gpu_hw": gpu_hw,
             "f5_devmm": devmm, "f5_tf_placement": tf_placement, "f5_cuda_setup": cuda_setup}
PLAIN = ("vllm_kv_needed",)  # a log that is the library's own output from its first line


def build(root: Path, d: Path, c: dict) -> dict:
    """Compose one `f5_*` case into `d`; return its label."""
    return compose(root, d, c, single=TEMPLATES, plain=PLAIN, steps=(2, 7), end_last=True)
