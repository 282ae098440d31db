"""A one-line description of where numbers were measured, written into every result file.

It names the CPU's instruction set as torch uses it: machines of one kind differ (AVX-512 with bf16
instructions vs AVX2 only), and which dtype makes multi-token forwards cheap depends on it."""

from __future__ import annotations

import os
import platform

import torch
import transformers


def _cpuinfo() -> tuple[str, set[str]]:
    """(model name, flags) from /proc/cpuinfo; the platform's processor string and no flags elsewhere."""
    cpu, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return cpu, flags


def cpu_isa() -> str:
    """torch's CPU capability (e.g. AVX2, AVX512) plus the bf16 / VNNI / AMX extensions the CPU reports."""
    _, flags = _cpuinfo()
    extras = [name for flag, name in (("avx512_bf16", "bf16"), ("avx512_vnni", "vnni"), ("amx_tile", "amx"))
              if flag in flags]  # fmt: skip
    isa = torch.backends.cpu.get_cpu_capability()
    return f"{isa} (+{', '.join(extras)})" if extras else isa


def describe() -> str:
    cpu, _ = _cpuinfo()
    parts = [
        f"{cpu}, ISA {cpu_isa()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads)"
    ]
    if torch.cuda.is_available():
        parts.append(f"GPU {torch.cuda.get_device_name(0)}")
    parts.append(f"transformers {transformers.__version__}")
    return "; ".join(parts)
