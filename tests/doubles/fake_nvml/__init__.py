"""A fake ``libnvidia-ml.so.1`` for tests that have no GPU.

Mocking ``pynvml`` at the Python level would skip the part that breaks in
practice: nvidia-ml-py's ctypes layer (symbol lookup by name, struct layouts,
the sizing protocol of list queries, error-code-to-exception mapping).  This
package instead compiles a small C library (``fake_nvml.c``) that exports the
NVML entry points sparkwatch uses, so the *real* ``pynvml`` loads it with
``CDLL("libnvidia-ml.so.1")`` and every call goes through the genuine binding.

The library emulates an NVIDIA GB10 (DGX Spark, unified memory) or a two-GPU
discrete machine, selected by ``FAKE_NVML_PROFILE``; a control file named by
``FAKE_NVML_CONTROL`` changes utilisation, power and failures while a test
runs.  See ``README.md`` in this folder for profiles and keys.

Two ways to make ``pynvml`` find the library:

* subprocess: set ``LD_LIBRARY_PATH`` to the directory returned by
  :func:`build_fake_nvml`;
* in-process: ``ctypes.CDLL(str(so_path), mode=ctypes.RTLD_GLOBAL)`` before the
  first ``pynvml.nvmlInit()``; glibc then satisfies ``CDLL("libnvidia-ml.so.1")``
  with the already-loaded object of that SONAME.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import tempfile

__all__ = ["LIBRARY_NAME", "SOURCE", "build_fake_nvml", "write_control"]

#: File name (and SONAME) that nvidia-ml-py dlopen()s on Linux.
LIBRARY_NAME = "libnvidia-ml.so.1"

#: The C source of the fake library.
SOURCE = pathlib.Path(__file__).with_name("fake_nvml.c")

_CFLAGS = [
    "-std=c11",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-O2",
    "-fPIC",
    "-fvisibility=hidden",
    "-pthread",
]


def build_fake_nvml(out_dir: pathlib.Path) -> pathlib.Path:
    """Compile ``fake_nvml.c`` into ``out_dir/libnvidia-ml.so.1`` and return its path.

    Raises:
        RuntimeError: gcc is missing or the compilation failed (gcc's stderr is
            included in the message).
    """
    gcc = shutil.which("gcc")
    if gcc is None:
        raise RuntimeError("gcc not found on PATH; cannot build the fake NVML library")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / LIBRARY_NAME
    cmd = [
        gcc,
        *_CFLAGS,
        "-shared",
        f"-Wl,-soname,{LIBRARY_NAME}",
        "-o",
        str(target),
        str(SOURCE),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(
            f"building {LIBRARY_NAME} failed (exit {proc.returncode}): {' '.join(cmd)}\n{proc.stderr}"
        )
    return target


def write_control(path: pathlib.Path, **values: str | int | list[str]) -> None:
    """Atomically replace the control file at ``path`` with ``key=value`` lines.

    Each keyword becomes one line; a list value (e.g. ``fail=[...]`` or
    ``fail_field=[...]``) becomes one line per element.  Calling it with no
    keywords writes an empty file, i.e. all defaults::

        write_control(p, util=50, fail=["nvmlDeviceGetPowerUsage:999"])

    The file is written to a temporary file in the same directory and moved
    into place with :func:`os.replace`, so the library never reads a partial
    file.  The new file's mtime is forced past the old one's, so even a
    same-sized rewrite within one filesystem timestamp tick is noticed.
    """
    lines: list[str] = ["# written by tests/doubles/fake_nvml.write_control"]
    for key, value in values.items():
        items = value if isinstance(value, list) else [value]
        lines.extend(f"{key}={item}" for item in items)
    text = "\n".join(lines) + "\n"

    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = pathlib.Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        try:
            old_mtime = path.stat().st_mtime_ns
        except FileNotFoundError:
            old_mtime = None
        new_mtime = tmp.stat().st_mtime_ns
        if old_mtime is not None and new_mtime <= old_mtime:
            os.utime(tmp, ns=(old_mtime + 1, old_mtime + 1))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
