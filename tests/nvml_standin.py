"""Building and loading the stand-in ``libnvidia-ml.so.1`` libraries of ``tests/fixtures/nvml/``.

Each stand-in is compiled with gcc against NVIDIA's official ``nvml.h`` (PyPI package
nvidia-nvml-dev), so every signature is NVIDIA's, and is loaded by the real pynvml ctypes code
through ``LD_LIBRARY_PATH`` in a subprocess.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "nvml"


def nvml_header() -> Path | None:
    """``nvml.h`` from the nvidia-nvml-dev package, or ``None`` where it is not installed."""
    try:
        import nvidia
    except ImportError:
        return None
    for folder in nvidia.__path__:
        for header in sorted(Path(folder).glob("*/include/nvml.h")):
            return header
    return None


def compile_standin(source: Path, folder: Path) -> Path:
    """Compile ``source`` into ``folder/libnvidia-ml.so.1`` and return ``folder``; skips the
    calling test where gcc or the header is missing."""
    header, gcc = nvml_header(), shutil.which("gcc")
    if header is None or gcc is None:
        pytest.skip("needs gcc and nvml.h from the nvidia-nvml-dev package")
    subprocess.run([gcc, "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror",
                    f"-I{header.parent}", "-o", str(folder / "libnvidia-ml.so.1"), str(source)],
                   check=True, capture_output=True, text=True)
    return folder


def standin_environment(library_dir: Path, **extra: str) -> dict[str, str]:
    """This process's environment with the stand-in first on the library path, our packages
    importable, and only the ``STANDIN_NVML*`` switches given in ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STANDIN_NVML")}
    env.update(LD_LIBRARY_PATH=str(library_dir), PYTHONPATH=str(ROOT), **extra)
    return env
