"""What machine we run on, for reports and cache keys."""

from __future__ import annotations

import hashlib
import json
import os
import platform
from functools import cache
from pathlib import Path
from typing import Any

import torch


@cache
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


#: the x86 vector levels pathweave tells apart, widest first (``PATHWEAVE_ISA`` takes one of them)
ISA_LEVELS = ("avx512", "avx2", "generic")


@cache
def cpu_isa() -> str:
    """The widest x86 vector level this CPU has: "avx512" (avx512f), "avx2" (avx2 and fma) or
    "generic"; results from machines of different levels must be told apart."""
    try:
        flags = next(
            (set(line.split(":", 1)[1].split()) for line in Path("/proc/cpuinfo").read_text().splitlines()
             if line.startswith("flags")),
            set(),
        )  # fmt: skip
    except OSError:
        flags = set()
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if {"avx2", "fma"} <= flags else "generic"


def describe(device: str = "cpu") -> dict:
    info = {
        "cpu": cpu_model(),
        "isa": cpu_isa(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def loadavg() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, rounded, for reports (None where the OS has none)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def machine_key(device: str = "cpu") -> str:
    """Short hash of what makes timings comparable: CPU or GPU model, thread count, torch version."""
    d = describe(device)
    text = f"{d['cpu']}|{d['torch_threads']}|{d['torch']}|{d.get('gpu', '')}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def cache_dir() -> Path:
    """$PATHWEAVE_CACHE_DIR, else $XDG_CACHE_HOME/pathweave, else ~/.cache/pathweave (made on write)."""
    env = os.environ.get("PATHWEAVE_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pathweave"


def read_cache(path: Path) -> Any:
    """The JSON stored at ``path``, or None when there is none or it cannot be read."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_cache(path: Path, data: Any) -> None:
    """Store ``data`` as JSON at ``path``; a read-only home only costs recomputing it next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data))
    except OSError:
        pass


#: L2 size assumed when the machine does not say
DEFAULT_L2 = 512 * 1024


@cache
def l2_bytes() -> int:
    """Per-core L2 cache size from sysfs, else DEFAULT_L2."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for idx in sorted(os.listdir(base)):
            with open(f"{base}/{idx}/level") as f:
                if f.read().strip() != "2":
                    continue
            with open(f"{base}/{idx}/size") as f:
                text = f.read().strip().upper()
            scale = {"K": 1024, "M": 1024 * 1024}.get(text[-1], 1)
            return int(text.rstrip("KM")) * scale
    except (OSError, ValueError):
        pass
    return DEFAULT_L2
