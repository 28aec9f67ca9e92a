"""The family of classify/rules/40-gpu-and-cuda.yaml: the GPU and its software. A CUDA runtime /
driver error name or code decides its class wherever a program prints it; driver-API error
wrappers (numba, cupy, pycuda) are cuda_error; Xids, GSP and recovery-action errors and CUDA
errors that mean the hardware failed are gpu_hardware; a GPU asked for that is not there, a
library built without (or unable to load) its GPU backend, a container runtime that cannot give
the job its GPUs are cuda_setup; Triton's resource errors. Benign mentions and image pulls that
fail stay what they were. Pure logic over small written logs."""

from __future__ import annotations

from pathlib import Path

import pytest
from classifylib import (
    LOSSES,
    MAIN_TB,
    PREP_TB,
    PROGRESS,
    SITE,
    SOLVER_PROGRESS,
    TRAINING,
    USER,
    job_verdict,
    log_alone,
    task,
    tb_by_line,
    verdict,
    write,
)

from gpualert_slurm.classify import (
    JobFacts,
    TaskInput,
    classify,
)
from gpualert_slurm.classify.node_trust import _kernel_classes

_PYX = "slurmstepd: error: pyxis:"


@pytest.mark.parametrize(("line", "cls"), [
    # the CUDA samples' helper_cuda.h: "CUDA error at %s:%d code=%d(%s) \"%s\""
    ('CUDA error at advect.cu:97 code=719(cudaErrorLaunchFailure) "cudaStreamSynchronize(s)"',
     "cuda_error"),
    ('CUDA error at halo.cu:31 code=716(cudaErrorMisalignedAddress) "cudaDeviceSynchronize()"',
     "cuda_error"),
    ('CUDA error at fft.cu:12 code=702(cudaErrorLaunchTimeout) "cudaMemcpy(h, d, n, kind)"',
     "cuda_error"),
    ('CUDA error at main.cu:58 code=2(cudaErrorMemoryAllocation) "cudaMalloc(&d_a, bytes)"',
     "cuda_oom"),
    ('CUDA error at main.cu:22 code=100(cudaErrorNoDevice) "cudaGetDeviceCount(&n)"',
     "cuda_setup"),
    ('CUDA error at main.cu:22 code=209(cudaErrorNoKernelImageForDevice) "cudaGetLastError()"',
     "cuda_setup"),
    ('CUDA error at scan.cu:140 code=710(cudaErrorAssert) "cudaDeviceSynchronize()"',
     "cuda_device_assert"),
    ('CUDA error at scan.cu:140 code=214(cudaErrorECCUncorrectable) "cudaDeviceSynchronize()"',
     "gpu_hardware"),
    # cuGetErrorName in a driver-API program; a runtime name in a custom message
    ("fatal: cuLaunchKernel failed: CUDA_ERROR_INVALID_PC (invalid program counter)", "cuda_error"),
    ("[md] cuCtxSynchronize returned CUDA_ERROR_HARDWARE_STACK_ERROR", "cuda_error"),
    ("ERROR gpu_step(): cudaErrorIllegalInstruction at integrate.cu:77", "cuda_error"),
    ("[init] cuInit -> CUDA_ERROR_SYSTEM_NOT_READY (system not yet initialized)", "cuda_setup"),
    ("[init] cudaSetDevice: cudaErrorStubLibrary", "cuda_setup"),
    ("cuMemcpyPeer failed with CUDA_ERROR_NVLINK_UNCORRECTABLE", "gpu_hardware"),
    # cudaGetErrorString behind a check macro (gpuErrchk's "GPUassert: %s %s %d")
    ("GPUassert: out of memory solver.cu 211", "cuda_oom"),
    ("GPUassert: the launch timed out and was terminated solver.cu 88", "cuda_error"),
    ("GPUassert: too many resources requested for launch solver.cu 88", "cuda_error"),
    # a bare cudaError_t code after a CUDA error header
    ("CUDA error 719 returned by cudaStreamSynchronize(stream)", "cuda_error"),
    ("CUDA Error code=2 at alloc.cu:40", "cuda_oom"),
    ("CUDA error(100) while selecting device", "cuda_setup"),
    ("CUDA error 220 in peer copy", "gpu_hardware"),
])
def test_cuda_error_name_or_code_decides_its_class(tmp_path: Path, line: str, cls: str) -> None:
    v = verdict(tmp_path, SOLVER_PROGRESS + line + "\n")
    assert v.cls == cls, (line, v.cls, v.evidence)


def test_a_cuda_name_in_a_debug_line_is_no_cause(tmp_path: Path) -> None:
    # cudaErrorNotReady is what a stream query returns while work is running
    text = (SOLVER_PROGRESS + "debug: cudaStreamQuery -> cudaErrorNotReady, polling again\n"
            "Traceback (most recent call last):\n  File \"run.py\", line 4, in <module>\n"
            "    check(cfg)\nValueError: tolerance must be positive\n")
    assert verdict(tmp_path, text).cls == "python_exception"


@pytest.mark.parametrize("text", [
    f"{_PYX} container start failed with error code: 1\n{_PYX} printing enroot log file:\n"
    f"{_PYX}     nvidia-container-cli: initialization error: nvml error: driver not loaded\n"
    f"{_PYX}     [ERROR] /usr/local/etc/enroot/hooks.d/98-nvidia.sh exited with return code 1\n"
    f"{_PYX} couldn't start container\n",
    f"{_PYX}     nvidia-container-cli: mount error: file creation failed: /var/lib/enroot/x/"
    "run/nvidia-persistenced/socket: no such device or address\n",
    "docker: Error response from daemon: could not select device driver \"\" with "
    "capabilities: [[gpu]].\n",
    "docker: Error response from daemon: unknown or invalid runtime name: nvidia.\n",
    "+ nvidia-smi\nNVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n",
    "Failed to initialize NVML: Unknown Error\nno GPUs, stopping\n",
    "WARNING: Could not find any nv libraries on this host!\nworker: GPU count 0, bailing out\n",
])
def test_container_without_the_gpu_stack_is_cuda_setup(tmp_path: Path, text: str) -> None:
    v = verdict(tmp_path, text)
    assert v.cls == "cuda_setup", (v.cls, v.evidence)


@pytest.mark.parametrize(("text", "cls"), [
    (f"{_PYX} failed to import docker image\n{_PYX}     [ERROR] URL https://registry.lab.org/"
     "v2/train/manifests/2.1 returned error code: 403 Forbidden\n", "permission_denied"),
    (f"{_PYX}     [ERROR] URL https://ghcr.io/v2/lab/train/manifests/cu124 returned error "
     "code: 404 Not Found\n", "file_not_found"),
    (f"{_PYX}     curl: (6) Could not resolve host: registry.lab.org\n{_PYX} failed to import "
     "docker image\n", "storage_io"),
])
def test_image_import_failures_are_not_the_gpu_stack(tmp_path: Path, text: str, cls: str) -> None:
    v = verdict(tmp_path, text)
    assert v.cls == cls, (v.cls, v.evidence)


def test_apptainer_warning_only_confirms(tmp_path: Path) -> None:
    # the warning explains a failure nothing else explains, never overrides a real cause
    text = ("WARNING: Could not find any nv files on this host!\n" + SOLVER_PROGRESS
            + "CUDA error at main.cu:58 code=2(cudaErrorMemoryAllocation) \"cudaMalloc(&a, n)\"\n")
    assert verdict(tmp_path, text).cls == "cuda_oom"


# ---- cuda_setup: a framework asked for a GPU the process does not have ----

@pytest.mark.parametrize("exc", [
    # TensorFlow eager, soft placement off, GPU:1 asked for on a node showing only a CPU
    "tensorflow.python.framework.errors_impl.InvalidArgumentError: Could not satisfy device "
    "specification '/job:localhost/replica:0/task:0/device:GPU:1'. enable_soft_placement=0. "
    "Supported device types [CPU]. All available devices "
    "[/job:localhost/replica:0/task:0/device:CPU:0]. [Op:MatMul]",
    # TensorFlow graph placer
    "tensorflow.python.framework.errors_impl.InvalidArgumentError: Cannot assign a device for "
    "operation dense/MatMul: {{node dense/MatMul}} was explicitly assigned to /device:GPU:0 but "
    "available devices are [ /job:localhost/replica:0/task:0/device:CPU:0 ]. Make sure the "
    "device specification refers to a valid device.",
    "tensorflow.python.framework.errors_impl.InvalidArgumentError: Unable to find any devices "
    "for spec /device:GPU:0 [Op:__inference_train_step_812]",
    # JAX told to use a GPU backend it cannot start
    "RuntimeError: Unable to initialize backend 'cuda': FAILED_PRECONDITION: No visible GPU "
    "devices. (set JAX_PLATFORMS='' to automatically choose an available backend)",
    "RuntimeError: Unable to initialize backend 'cuda': INTERNAL: no supported devices found for "
    "platform CUDA (you may need to uninstall the failing plugin package, or set "
    "JAX_PLATFORMS=cpu to skip this backend.)",
    # a GPU index past the ones the task can see
    "RuntimeError: CUDA error: invalid device ordinal\nCUDA kernel errors might be "
    "asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
    "tensorflow.python.framework.errors_impl.InvalidArgumentError: Invalid device ordinal value "
    "(3). Valid range is [0, 1].",
])
def test_gpu_asked_for_is_not_there(tmp_path: Path, exc: str) -> None:
    v = verdict(tmp_path, PROGRESS[:40] + tb_by_line(USER, exc=exc))
    assert v.cls == "cuda_setup", v.to_json()


def test_tf_op_without_gpu_kernel_on_a_gpu_node_is_not_setup(tmp_path: Path) -> None:
    # the GPU is there; the op has no GPU kernel: the program's placement, not the node's setup
    exc = ("tensorflow.python.framework.errors_impl.InvalidArgumentError: Could not satisfy "
           "device specification '/job:localhost/replica:0/task:0/device:GPU:0'. "
           "enable_soft_placement=0. Supported device types [CPU]. All available devices "
           "[/job:localhost/replica:0/task:0/device:CPU:0, "
           "/job:localhost/replica:0/task:0/device:GPU:0]. [Op:DecodeJpeg]")
    assert verdict(tmp_path, tb_by_line(USER, exc=exc)).cls != "cuda_setup"


def test_jax_assertion_in_backend_init_is_setup(tmp_path: Path) -> None:
    x = f"{SITE}/jax/_src/xla_bridge.py"
    text = ("JAX_PLATFORMS=cuda\n" + tb_by_line(
        ("/home/u/jx/fit.py", "<module>", "mesh = make_mesh(jax.devices())"),
        (x, "devices", "return get_backend(backend).devices()"),
        (x, "_get_backend_uncached", "bs = backends()"),
        (x, "backends", "assert _default_backend is not None"), exc="AssertionError"))
    v = verdict(tmp_path, text)
    assert v.cls == "cuda_setup", v.to_json()


def test_assertion_elsewhere_stays_python_exception(tmp_path: Path) -> None:
    text = tb_by_line(("/home/u/jx/fit.py", "<module>", "check(batch)"),
              ("/home/u/jx/data.py", "check", "assert batch.shape[0] % 8 == 0"),
              exc="AssertionError")
    assert verdict(tmp_path, text).cls == "python_exception"


# ---- cuda_error: Triton's resource errors ----

@pytest.mark.parametrize("exc", [
    "triton.runtime.errors.OutOfResources: out of resource: threads, Required: 2048, Hardware "
    "limit: 1024. Reducing block sizes or `num_stages` may help.",
    "torch._inductor.exc.InductorError: OutOfResources: out of resource: shared memory, "
    "Required: 262144, Hardware limit: 232448. Reducing block sizes or `num_stages` may help.",
    "RuntimeError: Triton Error [CUDA]: too many resources requested for launch",
])
def test_triton_resource_errors(tmp_path: Path, exc: str) -> None:
    v = verdict(tmp_path, PROGRESS + tb_by_line(USER, exc=exc))
    assert v.cls == "cuda_error", v.to_json()


# ---- gpu_hardware: CUDA runtime errors that mean the hardware failed ----

@pytest.mark.parametrize("exc", [
    "RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: CUDA error: "
    "CUDA_ERROR_NVLINK_UNCORRECTABLE: uncorrectable NVLink error detected during the execution",
    "RuntimeError: [cuda] cudaErrorNvlinkUncorrectable in all_gather",
])
def test_cuda_hardware_errors(tmp_path: Path, exc: str) -> None:
    v = verdict(tmp_path, PROGRESS + tb_by_line(USER, exc=exc))
    assert v.cls == "gpu_hardware", v.to_json()


def test_nvidia_smi_gpu_lost(tmp_path: Path) -> None:
    text = (PROGRESS + "+ nvidia-smi\nUnable to determine the device handle for GPU "
            "0000:41:00.0: GPU is lost.  Reboot the system to recover this GPU\n")
    assert verdict(tmp_path, text).cls == "gpu_hardware"


def test_unspecified_launch_failure_alone_is_cuda_error(tmp_path: Path) -> None:
    text = PROGRESS + tb_by_line(USER, exc="RuntimeError: CUDA error: unspecified launch failure")
    assert verdict(tmp_path, text).cls == "cuda_error"


# ---- a build without the backend ----

@pytest.mark.parametrize("line", [
    "RuntimeError: Distributed package doesn't have NCCL built in",
    "RuntimeError: Distributed package doesn't have MPI built in. MPI is only included if ...",
    "RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!",
])
def test_backend_not_built_is_setup(tmp_path: Path, line: str) -> None:
    assert job_verdict([task(tmp_path, PREP_TB + line + "\n")]).cls == "cuda_setup"


# ---- a library without (or unable to load) its GPU backend ----

@pytest.mark.parametrize("line", [
    "lightgbm.basic.LightGBMError: GPU Tree Learner was not enabled in this build.",
    "[LightGBM] [Fatal] CUDA Tree Learner was not enabled in this build.",
    "lightgbm.basic.LightGBMError: No OpenCL device found",
    "numba.cuda.cudadrv.error.CudaSupportError: CUDA is disabled due to setting "
    "NUMBA_DISABLE_CUDA=1 in the environment, or because CUDA is unsupported on 32-bit systems.",
    "numba.cuda.cudadrv.error.CudaSupportError: Error at driver init: ",
    "CUDA driver library cannot be found.",
    "xgboost.core.XGBoostError: [10:01:02] /workspace/src/common/common.h:199: XGBoost version "
    "not compiled with GPU support.",
])
def test_gpu_backend_not_built_or_not_loadable_is_cuda_setup(tmp_path: Path, line: str) -> None:
    v = verdict(tmp_path, "fitting on device=cuda\n" + MAIN_TB + line + "\n")
    assert v.cls == "cuda_setup", v.to_json()


def test_a_handled_backend_fallback_stays_success(tmp_path: Path) -> None:
    v = verdict(tmp_path, "numba: CudaSupportError caught, running the CPU kernels\n"
                "[train] done, auc 0.91\n", exit_code=0)
    assert v.cls == "success", v.to_json()


# ---- driver-API error wrappers ----

@pytest.mark.parametrize("line", [
    "numba.cuda.cudadrv.driver.CudaAPIError: [999] Call to cuMemcpyHtoD results in "
    "UNKNOWN_CUDA_ERROR",
    "numba.cuda.cudadrv.driver.CudaAPIError: [1] Call to cuLaunchKernel results in "
    "CUDA_ERROR_INVALID_VALUE",
    "cupy_backends.cuda.api.driver.CUDADriverError: CUDA_ERROR_INVALID_HANDLE: invalid resource "
    "handle",
    "pycuda._driver.LogicError: cuLaunchKernel failed: invalid resource handle",
])
def test_driver_api_error_wrappers_are_cuda_error(tmp_path: Path, line: str) -> None:
    v = verdict(tmp_path, MAIN_TB + line + "\n")
    assert v.cls == "cuda_error", v.to_json()


# ---- kernel Xids: GSP, initialization, recovery action ----

@pytest.mark.parametrize("kernel", [
    "[1200.1] NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to "
    "0x2 (Node Reboot Required)\n",
    "[1200.1] NVRM: Xid (PCI:0000:3b:00): 143, GPU Initialization Failure\n",
    "[1200.1] NVRM: _kgspIsHeartbeatTimedOut: Heartbeat timed out, currentTimeMs 1 heartbeat 2\n",
    "[1200.1] NVRM: Xid (PCI:0000:3b:00): 119, pid=2231, name=python, Timeout after 6s of waiting "
    "for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL).\n",
])
def test_gsp_and_recovery_xids_are_gpu_hardware(tmp_path: Path, kernel: str) -> None:
    log = (MAIN_TB + "RuntimeError: CUDA error: unknown error\nCUDA kernel errors might be "
           "asynchronously reported at some other API call\n")
    v = verdict(tmp_path, log, kernel=kernel)
    assert v.cls == "gpu_hardware", v.to_json()


def test_recovery_action_cleared_is_not_hardware(tmp_path: Path) -> None:
    kernel = ("[1200.1] NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x1 "
              "(GPU Reset Required) to 0x0 (None)\n")
    log = MAIN_TB + "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    v = verdict(tmp_path, log, kernel=kernel)
    assert v.cls == "cuda_error", v.to_json()


def test_xid_in_a_task_log_is_gpu_hardware_when_the_job_failed(tmp_path):
    path = write(tmp_path, "0.0.log", LOSSES + "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has "
                 "fallen off the bus.\nRuntimeError: CUDA error: unspecified launch failure\n")
    assert classify([TaskInput(path)], JobFacts(exit_code=1)).cls == "gpu_hardware"


# ---- GPU hardware in the job's own output (was: unknown / cuda_error) ----

@pytest.mark.parametrize("text", [
    "+ dmesg | tail -2\n[ 8123.441902] NVRM: GPU 0000:41:00.0: RmInitAdapter failed! "
    "(0x25:0x65:1457)\n[ 8123.442010] NVRM: GPU 0000:41:00.0: rm_init_adapter failed, device "
    "minor number 2\n",
    "+ nvidia-smi\nGPU 00000000:41:00.0: GPU requires reset\n",
    "+ dcgmi health -c -g 0\n| Health Monitor Report                              |\n"
    "| Overall Health            | Failure                |\n"
    "| -> 2                      | Failure                |\n"
    "|    -> Memory              | Failure                |\n"
    "|                           | Detected 3 volatile double-bit ECC error(s) in GPU 2. |\n",
    "+ nvidia-smi -q -d ROW_REMAPPER\n    Remapped Rows\n        Correctable Error           : 0\n"
    "        Uncorrectable Error         : 3\n        Pending                     : Yes\n"
    "        Remapping Failure Occurred  : Yes\n",
    # a health check the job script ran before its work (was: unknown / the later error's)
    "+ dcgmi diag -r 2\n| Diagnostic                | Result                        |\n"
    "| Denylist                  | Pass                          |\n"
    "| Memory                    | Fail - GPU: 5                 |\n"
    "| Warning                   | GPU 5 Error using CUDA API cudaMalloc |\n",
    "+ dcgmi diag -r 3\n| PCIe                      | Fail - GPU: 1                 |\n",
    # dcgmi's own name of the memory test, and a test that failed on one GPU of several: its
    # row says which passed, the next row (no name) which failed
    "+ dcgmi diag -r 2\n| GPU Memory                | Fail - GPU: 3                 |\n",
    "+ dcgmi diag -r 2\n| GPU Memory                | Pass - GPUs: 0, 1, 2, 4, 5, 6, 7 |\n"
    "|                           | Fail - GPU: 3                 |\n",
    "+ nvidia-smi\n|   3  NVIDIA H100 80GB HBM3          On  |   00000000:9B:00.0 Off |   "
    "               ERR! |\n| ERR!  ERR!   ERR!     ERR! /  ERR! |       0MiB /  81559MiB |"
    "     ERR!      Default |\n" + MAIN_TB + "RuntimeError: CUDA error: unknown error\n",
])
def test_gpu_hardware_wordings_in_job_output(tmp_path: Path, text: str) -> None:
    v = verdict(tmp_path, TRAINING + text)
    assert v.cls == "gpu_hardware", v.detail


@pytest.mark.parametrize("line", [
    "GPU 00000000:41:00.0: GPU requires reset",
    "| Overall Health            | Failure                |",
    "Detected 3 volatile double-bit ECC error(s) in GPU 2.",
    "        Remapping Failure Occurred  : Yes",
    "| Memory                    | Fail - GPU: 5                 |",
    "|                           | Fail - GPU: 0                 |",
    "| ERR!  ERR!   ERR!     ERR! /  ERR! |       0MiB /  81559MiB |     ERR!      Default |",
])
def test_job_output_hardware_wordings_back_no_drain(line: str) -> None:
    # the trust boundary stands: only the kernel rules judge root's sealed driver lines, and
    # these job-output wordings are not among them
    assert "gpu_hardware" not in _kernel_classes(line)


@pytest.mark.parametrize("text", [
    # the set-up rows, not the hardware's: a check that could not run
    "| Software                  | Fail                          |\n",
    "| Deployment                | Fail                          |\n",
    # a test that passed on every GPU, and a set-up row's second line
    "| GPU Memory                | Pass - All                    |\n",
    "| Persistence Mode          | Fail                          |\n"
    "|                           | Fail                          |\n",
    # a board without a reading says N/A, and one ERR! is no row of them
    "|  0%   34C    P0    N/A /  N/A |    0MiB / 16384MiB |      0%      Default |\n",
])
def test_health_rows_that_are_no_gpu_fault(tmp_path: Path, text: str) -> None:
    assert log_alone(tmp_path, TRAINING + text) != "gpu_hardware"


# ---- the build, not the program: invalid device function (was: unknown) ----

def test_invalid_device_function_is_the_build_not_the_program(tmp_path: Path) -> None:
    text = ("/opt/torch/bin/luajit: /opt/torch/share/lua/5.1/nn/THNN.lua:110: cuda runtime "
            "error (8) : invalid device function at /tmp/cutorch/lib/THC/THCTensorMath.cu:35\n")
    assert log_alone(tmp_path, TRAINING + text) == "cuda_setup"


# ---- container launch failures (pyxis / enroot; was: unknown) ----

@pytest.mark.parametrize("text,cls", [
    # the enroot log pyxis prints says why: the GPU hook, the registry's answer
    ("slurmstepd: error: pyxis: container start failed with error code: 1\n"
     "slurmstepd: error: pyxis: printing enroot log file:\n"
     "slurmstepd: error: pyxis:     nvidia-container-cli: initialization error: nvml error: "
     "driver not loaded\nslurmstepd: error: pyxis:     [ERROR] /etc/enroot/hooks.d/98-nvidia.sh"
     " exited with return code 1\nslurmstepd: error: pyxis: couldn't start container\n"
     "slurmstepd: error: spank: required plugin spank_pyxis.so: task_init() failed with rc=-1\n",
     "cuda_setup"),
    ("slurmstepd: error: pyxis: failed to import docker image\n"
     "slurmstepd: error: pyxis: printing enroot log file:\n"
     "slurmstepd: error: pyxis:     [ERROR] URL https://registry.example.org/v2/team/img/"
     "manifests/v3 returned error code: 401 Unauthorized\n"
     "slurmstepd: error: pyxis: couldn't start container\n", "permission_denied"),
])
def test_pyxis_enroot_log_decides(tmp_path: Path, text: str, cls: str) -> None:
    assert log_alone(tmp_path, text) == cls


def test_pyxis_failure_alone_says_the_container_did_not_start(tmp_path: Path) -> None:
    v = verdict(tmp_path, "slurmstepd: error: pyxis: container start failed with error code: 1\n"
                "slurmstepd: error: spank: required plugin spank_pyxis.so: task_init() failed "
                "with rc=-1\nslurmstepd: error: Failed to invoke spank plugin stack\n")
    assert v.cls == "cuda_setup" and v.confidence <= 0.6
    assert "container did not start" in v.detail and "credentials" in v.detail
