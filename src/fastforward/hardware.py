"""The machine: where numbers were measured, which dtype suits it, and whether it is quiet enough to time.

- :func:`describe` is the one-line hardware description written into every result file. It names the CPU's
  instruction set as torch uses it: machines of one kind differ (AVX-512 with bf16 instructions vs AVX2
  only), and which dtype makes multi-token forwards cheap depends on it.
- :func:`choose_dtype` is ``--dtype auto``: a pure function of the device and the CPU's flags, so it can be
  tested with the recorded flags of other CPUs.
- :func:`busy_state`, :func:`choose_threads` and :func:`timing_lock` guard timing runs: on 2 cores, 2 torch
  threads next to another busy process stall at their OpenMP barrier (measured 40 ms -> 700 ms per token),
  so a timing run warns when the machine is busy and defaults to the cores that are free. All of this only
  *reads* ``/proc``; nothing here ever pauses or signals a process.

torch and transformers are imported inside the functions that need them, so the CLI can check its
arguments (and print ``--help``) without paying for those imports.
"""

from __future__ import annotations

import os
import platform
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

# CPU flags (as /proc/cpuinfo spells them) that make bf16 matmuls native rather than emulated.
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
LOCK_PATH = Path(tempfile.gettempdir()) / "ffbench.lock"


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


def isa_limit() -> str:
    """oneDNN's ISA cap (``ONEDNN_MAX_CPU_ISA``, e.g. ``AVX2``), or "" when unset. With it (and
    ``ATEN_CPU_CAPABILITY=avx2`` for torch's own kernels) a CPU with AVX-512 and AMX runs torch as an
    AVX2-only CPU would: the way to reproduce that kind of machine's costs on this one."""
    return os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()


def limit_flags(flags: set[str], limit: str) -> set[str]:
    """The flags a process may use under oneDNN's ISA cap ``limit``: AVX2 and below drop every AVX-512 and
    AMX flag; an AVX-512 cap keeps bf16 only when it names BF16 or AMX, and AMX only when it names AMX."""
    if not limit or limit in ("ALL", "DEFAULT") or "AMX" in limit:
        return set(flags)
    if not limit.startswith("AVX512") and not limit.startswith("AVX10"):
        return {f for f in flags if not f.startswith(("avx512", "amx"))}
    drop = ("amx",) if "BF16" in limit or "FP16" in limit else ("amx", "avx512_bf16", "avx512_fp16")
    return {f for f in flags if not f.startswith(drop)}


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), or the platform's processor string."""
    return _cpuinfo()[0]


def cpu_flags() -> set[str]:
    """The CPU's feature flags as this process may use them (empty where /proc/cpuinfo is not available):
    those the CPU reports, less what ``ONEDNN_MAX_CPU_ISA`` caps (:func:`limit_flags`)."""
    return limit_flags(_cpuinfo()[1], isa_limit())


def isa_key() -> str:
    """A short folder name for the instructions this process may use: torch's capability and a hash of the
    CPU's name, its usable flags and the ``ONEDNN_MAX_CPU_ISA`` cap.

    Why: inductor's on-disk caches are keyed by what is compiled, not by the ISA it was compiled for. On the
    AMX Xeon, a process under the AVX2 cap that shared them with uncapped runs compiled tiny models whose
    logits came out NaN (session 43; with a fresh cache the same test passed), so each ISA gets a cache of
    its own (:func:`fastforward.core.compiled.inductor_cache`)."""
    import hashlib
    import json

    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    described = json.dumps([cpu_name(), sorted(cpu_flags()), capability, isa_limit()])
    return f"{capability.lower()}-{hashlib.sha256(described.encode()).hexdigest()[:10]}"


def parse_cache_size(text: str) -> int | None:
    """Bytes in a cache size as Linux's sysfs writes it ("32768K", "480M", "1G"), None if unreadable."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    digits = text[:-1] if text[-1:] in "KMG" else text
    return int(digits) * scale if digits.isdigit() else None


def last_level_cache_bytes(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int | None:
    """The size of the largest data cache the first core uses (its highest cache level: the L3 of a server
    CPU), from Linux's sysfs; None where the system does not say. Why: whether the buckets of a compiled
    model should share one copy of its weights depends on whether the weights stay in this cache between
    steps (:func:`fastforward.core.compiled.shares_weights`)."""
    best: tuple[int, int] | None = None
    try:
        for index in root.glob("index*"):
            if (index / "type").read_text().strip() == "Instruction":
                continue
            level, size = int((index / "level").read_text()), parse_cache_size((index / "size").read_text())
            if size is not None and (best is None or level > best[0]):
                best = (level, size)
    except (OSError, ValueError):
        return None
    return None if best is None else best[1]


def cpu_isa() -> str:
    """torch's CPU capability (e.g. AVX2, AVX512) plus the bf16 / VNNI / AMX extensions this process may use
    (:func:`cpu_flags`: those the CPU reports, less what an ISA cap removes)."""
    import torch

    flags = cpu_flags()
    extras = [name for flag, name in (("avx512_bf16", "bf16"), ("avx512_vnni", "vnni"), ("amx_tile", "amx"))
              if flag in flags]  # fmt: skip
    isa = torch.backends.cpu.get_cpu_capability()
    return f"{isa} (+{', '.join(extras)})" if extras else isa


def describe() -> str:
    import torch
    import transformers

    cpu, _ = _cpuinfo()
    if limit := isa_limit():
        aten = os.environ.get("ATEN_CPU_CAPABILITY", "unset")
        cpu += f" (capped: ONEDNN_MAX_CPU_ISA={limit}, ATEN_CPU_CAPABILITY={aten})"
    parts = [
        f"{cpu}, ISA {cpu_isa()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads)"
    ]
    if torch.cuda.is_available():
        parts.append(f"GPU {torch.cuda.get_device_name(0)}")
    parts.append(f"transformers {transformers.__version__}")
    return "; ".join(parts)


# ``git archive`` writes the archived commit here (.gitattributes: export-subst); a checkout keeps the placeholder
ARCHIVED_REVISION = "$Format:%H$"


def archived_revision(text: str = ARCHIVED_REVISION) -> str | None:
    """The commit a ``git archive`` of the tree was made from (``text`` as the archive wrote it), None in a
    checkout, where the placeholder stays as it is."""
    return None if not text or text.startswith("$Format") else text


def git_revision(where: Path | None = None) -> str | None:
    """The commit the code ran from (``+dirty`` with uncommitted changes); outside a git checkout, the commit
    of the ``git archive`` it came from, else None.

    Why the archive: timings run from a frozen copy of the tree (``git archive HEAD | tar -x``) so that work
    on the checkout cannot change the code mid-run, and their results files recorded no revision at all."""
    import subprocess

    where = where or Path(__file__).resolve().parent
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=5
        )
        if rev.returncode != 0:
            return archived_revision()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=where, capture_output=True, text=True, timeout=5,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):  # no git at all: an archived copy still names its commit
        return archived_revision()
    return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def provenance() -> dict[str, object]:
    """What every results file records so that a figure can be traced to the code and machine behind it:
    the ISA, the library versions, the git revision and the UTC date."""
    import datetime

    import torch
    import transformers

    return {
        "isa": cpu_isa(),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "revision": git_revision(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


# --------------------------------------------------------------------------- --dtype auto


def choose_dtype(
    device: str, flags: set[str] | frozenset[str], capability: str, cuda_bf16: bool = True
) -> tuple[str, str]:
    """``--dtype auto``: (dtype, why) for a device and the CPU's flags / torch CPU capability.

    CPU: bfloat16 only where the CPU has native bf16 matmuls (AVX512_BF16 or AMX); elsewhere torch emulates
    bf16 and it is the slow case, so float32. CUDA: bfloat16, or float16 on GPUs without bf16."""
    if device.startswith("cuda"):
        if cuda_bf16:
            return "bfloat16", "CUDA GPU with bf16 support"
        return "float16", "CUDA GPU without bf16 support"
    native = [f for f in BF16_FLAGS if f in flags]
    if native or "BF16" in capability.upper() or "AMX" in capability.upper():
        what = ", ".join(native) or capability
        return "bfloat16", f"this CPU has native bf16 matmuls ({what})"
    return "float32", (
        f"this CPU ({capability}) has no AVX512_BF16 or AMX, so bf16 would be emulated and slower; "
        "pass --dtype bfloat16 to override"
    )


def training_autocast(requested: str, device: str = "cpu") -> tuple[bool, str | None]:
    """Whether a trainer runs under bf16 autocast: ``bf16`` yes, ``fp32`` no, ``auto`` where :func:`choose_dtype`
    picks bfloat16 (native bf16 CPUs, CUDA). Measured on an AVX2-only CPU: a Chimera training step took > 30 s
    under bf16 autocast and 3.2 s in fp32. Returns (autocast, why) with why set for ``auto``."""
    if requested != "auto":
        return requested == "bf16", None
    dtype, why = resolve_dtype("auto", device)
    return dtype in (
        "bfloat16",
        "float16",
    ), f"training in {'bf16 autocast' if dtype != 'float32' else 'fp32'}: {why}"


def resolve_dtype(requested: str, device: str = "cpu") -> tuple[str, str | None]:
    """The dtype to load: ``requested`` itself, or :func:`choose_dtype` on this machine for ``auto``
    (then also the reason, to be printed once)."""
    if requested != "auto":
        return requested, None
    import torch

    cuda_bf16 = False
    if device.startswith("cuda") and torch.cuda.is_available():
        cuda_bf16 = bool(torch.cuda.is_bf16_supported())
    return choose_dtype(device, cpu_flags(), torch.backends.cpu.get_cpu_capability(), cuda_bf16)


# --------------------------------------------------------------------------- busy machine, threads, lock


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask), which can be fewer than the machine has."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass
class BusyState:
    """How loaded the machine is, from /proc only: ``other_cores`` is CPU time other processes used over
    the sampling interval, in cores; ``top`` names the busiest of them."""

    cores: int
    load1: float
    other_cores: float
    top: list[tuple[str, int, float]] = field(default_factory=list)  # (command, pid, cores)

    @property
    def busy(self) -> bool:
        return self.load1 > self.cores or self.other_cores >= 0.5

    def message(self) -> str:
        who = ", ".join(f"{name} (pid {pid}) {c:.0%}" for name, pid, c in self.top[:3])
        return (
            f"the machine is busy (load average {self.load1:.2f} on {self.cores} cores; other processes use "
            f"{self.other_cores:.1f} cores{': ' + who if who else ''}): timings will be noisy"
        )


def _proc_ticks() -> dict[int, tuple[str, int]]:
    """pid -> (command, utime + stime ticks) of every process readable in /proc."""
    out: dict[int, tuple[str, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="utf-8", errors="replace") as f:
                raw = f.read()
        except OSError:
            continue
        name = raw[raw.find("(") + 1 : raw.rfind(")")]
        rest = raw[raw.rfind(")") + 2 :].split()
        out[int(entry.name)] = (name, int(rest[11]) + int(rest[12]))  # fields 14 and 15: utime, stime
    return out


def busy_state(interval_s: float = 0.3) -> BusyState:
    """Sample the CPU time of every other process over ``interval_s`` (reads /proc only)."""
    cores = usable_cores()
    try:
        load1 = os.getloadavg()[0]
    except OSError:
        load1 = 0.0
    if not os.path.isdir("/proc"):
        return BusyState(cores, load1, 0.0)
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    mine = {os.getpid()}
    before = _proc_ticks()
    start = time.monotonic()
    time.sleep(interval_s)
    after = _proc_ticks()
    elapsed = time.monotonic() - start
    top: list[tuple[str, int, float]] = []
    for pid, (name, ticks) in after.items():
        if pid in mine or pid not in before:
            continue
        used = (ticks - before[pid][1]) / hz / elapsed
        if used > 0.05:
            top.append((name, pid, used))
    top.sort(key=lambda t: -t[2])
    return BusyState(cores, load1, sum(t[2] for t in top), top)


def choose_threads(cores: int, other_cores: float) -> int:
    """torch threads for a timing run: the cores other processes leave free (at least 1), because a
    thread that shares its core with another process stalls every OpenMP barrier of a forward."""
    return max(1, min(cores, round(cores - other_cores)))


def _holder_of(path: Path) -> int | None:
    """The pid holding a flock on ``path``, from /proc/locks (None if unlocked or unknown)."""
    try:
        inode = path.stat().st_ino
        with open("/proc/locks", encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (a "->" marks blocked waiters)
                if "->" in parts or len(parts) < 6 or parts[1] != "FLOCK":
                    continue
                if int(parts[5].rsplit(":", 1)[1]) == inode:
                    return int(parts[4])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _ancestors() -> set[int]:
    """This process's parent, grandparent, ... (a timing run started under ``flock LOCK cmd`` is inside
    its caller's lock)."""
    out, pid = set(), os.getppid()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
                raw = f.read()
            pid = int(raw[raw.rfind(")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


_LOCK_FILE: IO[str] | None = None


def timing_lock(path: Path = LOCK_PATH) -> str | None:
    """Take the advisory timing lock for the rest of this process (never waits, never signals anyone).

    Returns a warning when another timing run holds it (then both runs' figures are noisy), else None. A
    lock held by one of our ancestors (``flock /tmp/ffbench.lock fastforward bench ...``) counts as ours."""
    global _LOCK_FILE
    import fcntl

    if _LOCK_FILE is not None:
        return None
    try:
        f = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held until the process exits
    except OSError:
        return None
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        holder = _holder_of(path)
        if holder is not None and (holder == os.getpid() or holder in _ancestors()):
            return None
        who = f" (pid {holder})" if holder else ""
        return f"another timing run holds {path}{who}: both runs' timings will be noisy"
    _LOCK_FILE = f
    return None


def timing_preflight(threads: int | None) -> tuple[int, list[str]]:
    """Before a timing run: take the lock, look at the load, and pick the torch threads.

    Returns (threads, warnings): ``threads`` is the user's choice or the cores other processes leave free;
    the warnings (busy machine, a held lock, more threads than free cores) are for the caller to print."""
    warnings = [w for w in [timing_lock()] if w]
    state = busy_state()
    if state.busy:
        warnings.append(state.message())
    chosen = threads or choose_threads(state.cores, state.other_cores)
    if threads and threads + state.other_cores > state.cores + 0.5:
        warnings.append(
            f"--threads {threads} with {state.other_cores:.1f} of {state.cores} cores busy oversubscribes "
            "the cores: forwards will stall at their thread barriers"
        )
    return chosen, warnings
