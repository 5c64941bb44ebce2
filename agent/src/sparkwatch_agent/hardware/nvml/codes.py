"""NVML return codes (nvml.h), stable across drivers; kept here so a fake binding needs only NVMLError."""

from __future__ import annotations

NVML_ERROR_NAMES: dict[int, str] = {
    1: "UNINITIALIZED",
    2: "INVALID_ARGUMENT",
    3: "NOT_SUPPORTED",
    4: "NO_PERMISSION",
    5: "ALREADY_INITIALIZED",
    6: "NOT_FOUND",
    7: "INSUFFICIENT_SIZE",
    8: "INSUFFICIENT_POWER",
    9: "DRIVER_NOT_LOADED",
    10: "TIMEOUT",
    11: "IRQ_ISSUE",
    12: "LIBRARY_NOT_FOUND",
    13: "FUNCTION_NOT_FOUND",
    14: "CORRUPTED_INFOROM",
    15: "GPU_IS_LOST",
    16: "RESET_REQUIRED",
    17: "OPERATING_SYSTEM",
    18: "LIB_RM_VERSION_MISMATCH",
    19: "IN_USE",
    20: "MEMORY",
    21: "NO_DATA",
    22: "VGPU_ECC_NOT_SUPPORTED",
    23: "INSUFFICIENT_RESOURCES",
    24: "FREQ_NOT_SUPPORTED",
    25: "ARGUMENT_VERSION_MISMATCH",
    26: "DEPRECATED",
    27: "NOT_READY",
    28: "GPU_NOT_FOUND",
    29: "INVALID_STATE",
    999: "UNKNOWN",
}

NVML_ERROR_INSUFFICIENT_SIZE = 7

#: Failures at the probe that say nothing of the field for later: it is polled, each failure a gap. Any other
#: (NOT_SUPPORTED, FUNCTION_NOT_FOUND, NO_PERMISSION, DEPRECATED, …) holds for the agent's life (domain.md:
#: probe once at start). OUT_OF_RANGE is the agent's own: a value no GPU can have.
TRANSIENT_ERRORS = frozenset(
    {"TIMEOUT", "UNKNOWN", "IN_USE", "MEMORY", "NO_DATA", "INSUFFICIENT_RESOURCES", "NOT_READY"}
    | {"OUT_OF_RANGE"}
)
#: Codes that mean the device or library is gone, not that one field is missing.
DEVICE_LEVEL_ERRORS = frozenset(
    {
        "UNINITIALIZED",
        "DRIVER_NOT_LOADED",
        "LIBRARY_NOT_FOUND",
        "GPU_IS_LOST",
        "RESET_REQUIRED",
        "LIB_RM_VERSION_MISMATCH",
        "GPU_NOT_FOUND",
    }
)


def error_name(code: int) -> str:
    """``NOT_SUPPORTED`` for 3; an unknown code keeps its number (``NVML_1234``)."""
    return NVML_ERROR_NAMES.get(code, f"NVML_{code}")
