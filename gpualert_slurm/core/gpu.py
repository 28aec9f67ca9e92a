"""A point-in-time GPU snapshot through NVML (nvidia-ml-py), for the Prolog's node record and,
later, the Epilog's before/after comparison. No GPU, no driver or no library is a normal case:
the snapshot then says "unavailable: <why>"."""

from __future__ import annotations

import contextlib
from typing import Any


def _field(fn: Any, *args: Any) -> Any:
    try:
        v = fn(*args)
    except Exception as e:  # one unsupported counter must not lose the others
        return f"unavailable: {type(e).__name__}: {e}"
    return v.decode() if isinstance(v, bytes) else v


def _remapped(pynvml: Any, h: Any) -> dict[str, Any]:
    rows = _field(pynvml.nvmlDeviceGetRemappedRows, h)
    if not isinstance(rows, tuple | list) or len(rows) < 4:
        return {"remapped_rows": rows}
    return {"remapped_rows_corrected": rows[0], "remapped_rows_uncorrected": rows[1],
            "remapped_rows_pending": bool(rows[2]), "remapped_rows_failure": bool(rows[3])}


def gpu_snapshot() -> dict[str, Any] | str:
    try:
        import pynvml
    except ImportError as e:
        try:  # the Debian package bundles NVIDIA's binding, which Debian lacks (README)
            from gpualert_slurm._vendor import pynvml
        except ImportError:
            return f"unavailable: nvidia-ml-py not installed ({e})"
    try:
        pynvml.nvmlInit()
    except Exception as e:
        return f"unavailable: {type(e).__name__}: {e}"
    try:
        out: dict[str, Any] = {
            "driver": _field(pynvml.nvmlSystemGetDriverVersion),
            "devices": [],
        }
        n = pynvml.nvmlDeviceGetCount()
        for i in range(n):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = _field(pynvml.nvmlDeviceGetMemoryInfo, h)
            dev: dict[str, Any] = {
                "index": i,
                "name": _field(pynvml.nvmlDeviceGetName, h),
                "uuid": _field(pynvml.nvmlDeviceGetUUID, h),
                "pci_bus_id": _field(lambda h: pynvml.nvmlDeviceGetPciInfo(h).busId, h),
                "memory_total": getattr(mem, "total", mem),
                "memory_used": getattr(mem, "used", mem),
                "temperature_c": _field(pynvml.nvmlDeviceGetTemperature, h,
                                        pynvml.NVML_TEMPERATURE_GPU),
                "ecc_uncorrected_volatile": _field(
                    pynvml.nvmlDeviceGetTotalEccErrors, h,
                    pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC),
                "ecc_corrected_volatile": _field(
                    pynvml.nvmlDeviceGetTotalEccErrors, h,
                    pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC),
                "retired_pages_pending": _field(pynvml.nvmlDeviceGetRetiredPagesPendingStatus, h),
                # Ampere and later remap rows instead of retiring pages: (corrected, uncorrected,
                # pending, failure) rows; the latter three moving is a hardware fault
                **_remapped(pynvml, h),
                "clock_sm_mhz": _field(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM),
                "clock_mem_mhz": _field(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_MEM),
                "clock_event_reasons": _field(
                    getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                    or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, h),
                "processes": _field(
                    lambda h: [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)], h),
            }
            out["devices"].append(dev)
        return out
    except Exception as e:
        return f"unavailable: {type(e).__name__}: {e}"
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
