"""How much memory and disk compiled packages take, and how many fit: the policy behind ``--buckets auto``
and the bound on the package store.

Why a module of its own: packages are keyed by a hash of the code they hold (:data:`fastforward.core.aot.TRACED`);
this policy is not in them, so tuning it must not rebuild every package.

A package on inductor's GEMM templates holds its own copy of the weights (bf16 on AMX); building one takes
several times the weights on top of what the process holds, and a build that runs out of memory is killed
with the whole process (these machines have no swap). Measured on Qwen2.5-Coder-1.5B in bf16 (3.56 GB of
state) on a 2-vCPU AMX Xeon with 23.5 GiB: the 1-token build peaked at 19.6 GB resident (15.2 GB, 4.3x the
weights, above the loaded model; session 42), the 8-token build beside the loaded 1-token package at 22.7 GB
(session 41), and a package on disk and in memory is 3.7 GB (1.04x).

The store's bound (:func:`store_limit`) is ``FASTFORWARD_COMPILED_GB`` where set, else half of what the store
could grow into (the free disk plus the store itself), at least 8 GB. Why not a fixed 8 GB: since float32
buckets too keep a copy of the weights each where the CPU's cache is small
(:func:`fastforward.core.compiled.shares_weights`), SmolLM2-135M's six float32 buckets alone are 3.9 GB and
the int8 1.5B's are 11.4 GB. On a 2-core AMD EPYC (session 45) a bench of the 1.5B pushed SmolLM2's packages
out of an 8 GB store, and the next SmolLM2 run spent ~14 minutes building them again, with 38 GB of disk
free.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

STORE_GB_ENV = "FASTFORWARD_COMPILED_GB"
STORE_GB = 8.0  # the least default bound on the package store, in GB (10**9 bytes)
DISK_SHARE = 0.5  # of the free disk plus the store, the share the store may take by default
BUILD_FACTOR = 4.3  # a build's peak above the process's resident memory, in weight bytes
# the same for a bfloat16 build whose GEMMs are all ATen's (oneDNN's prepacked linear): see build_factor
ATEN_BF16_BUILD_FACTOR = 3.4
PACKAGE_FACTOR = 1.04  # a loaded package that holds its own weights, in weight bytes


def build_factor(dtype: torch.dtype, gemm: str, quantized: bool) -> float:
    """A package build's peak memory above the process, in weight bytes, for a model in ``dtype`` whose GEMMs
    go to the backends ``gemm`` (``max_autotune_gemm_backends``), with int8/int4 weights where ``quantized``.

    Why two: :data:`BUILD_FACTOR` was measured on builds over inductor's GEMM templates (bf16 on AMX, 4.3x).
    A bfloat16 build on ATen alone (oneDNN's prepacked linear: the widths above 4 on an AVX-512 CPU without
    AMX) takes less. Qwen2.5-Coder-1.5B's 8-token build on a 2-core Zen 4 EPYC (3.56 GB of weights), three
    readings: a 14.1 GB peak resident in a process of its own (session 59); 10.3 and 9.7 GB out of
    ``MemAvailable`` beside the loaded model and 1-token package, sampled every second (session 60,
    results/compiled_s60/memavail_*.txt): 2.7-2.9x. At 4.3x that build (15.3 GB) was refused with 15.2 GB free
    in a first bench of the 1.5B pair, so its wide steps ran eagerly and every method fell below AR (0.71-0.86x,
    session 60). 3.4 keeps ~0.5x of margin over the highest reading, for a reading taken once a second.
    Everything else (templates, int8/int4 weights, float16) keeps the measured 4.3x. Measured only on an AVX-512
    CPU with avx512_bf16; a bf16 build on ATen elsewhere (AVX2, AVX-512 without bf16) is assumed alike.
    :func:`packages_that_fit` (how many widths ``--buckets auto`` asks for) still sizes the last build at 4.3x."""
    if dtype == torch.bfloat16 and gemm == "ATEN" and not quantized:
        return ATEN_BF16_BUILD_FACTOR
    return BUILD_FACTOR


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of ``model``'s parameters and buffers, each storage counted once (tied weights share one)."""
    seen: dict[int, int] = {}
    for t in model.state_dict(keep_vars=True).values():
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


def available_memory() -> int | None:
    """The memory the kernel says new allocations can take without swapping (``MemAvailable``, bytes), or
    None where /proc/meminfo does not say (then nothing is bounded by it)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def packages_that_fit(weights: int, available: int | None, most: int) -> int:
    """How many packages that each hold ``weights`` bytes of weights fit in ``available`` bytes, each built
    after the others are loaded, the last build needing :data:`BUILD_FACTOR` times the weights on top; at
    least 1 (a build that would not fit is refused when it comes, :func:`shortfall`), at most ``most``
    (all of them where ``available`` is unknown)."""
    if available is None or not weights:
        return most
    room = available - BUILD_FACTOR * weights
    return max(1, min(most, 1 + int(room // (PACKAGE_FACTOR * weights)))) if room > 0 else 1


def shortfall(weights: int, build: bool, factor: float = BUILD_FACTOR) -> tuple[float, float] | None:
    """(GB that building, or else loading, a package holding ``weights`` bytes of weights needs; GB free)
    when it would not fit now, else None (also where the free memory is unknown). A build needs ``factor``
    times the weights (:func:`build_factor`). Memory an earlier build freed is handed back first
    (:func:`return_freed_memory`), so it counts as free."""
    return_freed_memory()
    free = available_memory()
    need = (factor if build else PACKAGE_FACTOR) * weights
    return (need / 1e9, free / 1e9) if free is not None and free < need else None


def unloading_helps(weights: int, available: int | None, loaded: int, factor: float = BUILD_FACTOR) -> bool:
    """Whether dropping ``loaded`` packages (each holding ``weights`` bytes of weights) makes room to build one
    more (``factor`` times the weights, :func:`build_factor`), and to load all of them again afterwards beside
    it, in ``available`` bytes. False where the free memory is unknown (nothing is refused then anyway) or
    nothing is loaded.

    Why both: dropping packages for a build that still would not fit reloads them for nothing, and a build
    that fits only while the others are out would leave one of them without room when it loads again; that
    width (perhaps the 1-token one every AR step runs) would then run eagerly instead of the new one."""
    if available is None or loaded <= 0:
        return False
    room = available + loaded * PACKAGE_FACTOR * weights
    return room >= max(factor, (loaded + 1) * PACKAGE_FACTOR) * weights


def return_freed_memory() -> None:
    """Collect garbage and ask glibc to give its freed heap back to the system (``malloc_trim``; a no-op
    elsewhere). Why: a package build frees ~15 GB of temporaries for the 1.5B, which glibc keeps mapped, so
    the kernel's ``MemAvailable`` (what the next build is checked against, and what any other process can
    take) stays that much lower until it is returned."""
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, looked up once; None where there is none."""
    return _libc_function("malloc_trim", [ctypes.c_size_t])


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library, loaded once (``find_library`` runs ``ldconfig``); None where there is none."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name, use_errno=True) if name is not None else None
    except OSError:
        return None


def _libc_function(symbol: str, argtypes: list[Any]) -> Callable[..., int] | None:
    """The C library's ``symbol`` returning an int, with ``argtypes``; None where there is none."""
    lib = _libc()
    fn = getattr(lib, symbol, None) if lib is not None else None
    if fn is not None:
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
    return fn


def store_bound(free_disk: int, store_bytes: int) -> int:
    """The default bound on the store, in bytes: :data:`DISK_SHARE` of the free disk plus the store itself
    (at equilibrium the store takes as much as it leaves free), never below :data:`STORE_GB`."""
    return max(int(STORE_GB * 1e9), int(DISK_SHARE * (free_disk + store_bytes)))


def store_limit(store: Path | None = None, store_bytes: int = 0) -> int:
    """The store's bound in bytes: ``FASTFORWARD_COMPILED_GB`` where set (a bad value is said, not guessed
    around: this runs after a long build, so it raises rather than trims by a number nobody set), else
    :func:`store_bound` of the free disk under ``store`` (its nearest existing folder) and the store's
    ``store_bytes``; :data:`STORE_GB` where no store is named."""
    raw = os.environ.get(STORE_GB_ENV, "")
    if raw:
        try:
            gb = float(raw)
        except ValueError:
            raise ValueError(f"{STORE_GB_ENV}={raw!r} is not a number of GB") from None
        if gb < 0:
            raise ValueError(f"{STORE_GB_ENV}={raw!r} is negative")
        return int(gb * 1e9)
    if store is None:
        return int(STORE_GB * 1e9)
    where = Path(store)
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        return int(STORE_GB * 1e9)
    return store_bound(free, store_bytes)


def freeze_heap() -> None:
    """Collect once, then put every Python object alive now (the model, torch's and transformers' modules,
    loaded packages) out of the cyclic collector's reach: it stops re-scanning them.

    Why: with a model loaded the heap holds ~450k tracked objects, and a full collection over them took
    ~200 ms (SmolLM2 compiled in bf16 on a 2-core EPYC, results/compiled_s47/gc.txt), a stall in whichever
    generation it fell on: 15-20 decoding steps of a 10 ms model, charged at random to one method of a bench
    or to one request of a server. Frozen, the same collections took 0.8-1.6 ms. Garbage among the frozen
    objects that only a cycle collection could free stays until :func:`gc.unfreeze`."""
    gc.collect()
    gc.freeze()


THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")
HUGE_PAGES_ENV = "FASTFORWARD_HUGE_PAGES"  # "0": leave the process's pages as the kernel gave them
HUGE_PAGE = 2 << 20  # bytes of an x86-64 (and arm64 4K-granule) transparent huge page
MADV_HUGEPAGE, MADV_COLLAPSE = 14, 25  # linux/mman.h; MADV_COLLAPSE since Linux 6.1
COLLAPSE_PIECE = 64 << 20  # bytes collapsed per call (huge_pages)
COLLAPSE_PASSES = 6  # at most; passes go on while each moves a piece or more (huge_pages)


def thp_mode(path: Path = THP_ENABLED) -> str | None:
    """The kernel's transparent huge page mode (``always``, ``madvise`` or ``never``: the bracketed word),
    None where the kernel has no such setting (not Linux, or built without THP)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None


def anonymous_spans(maps: str, least: int = HUGE_PAGE) -> list[tuple[int, int]]:
    """From the text of ``/proc/<pid>/maps``: the ``[start, end)`` parts, aligned to :data:`HUGE_PAGE`, of
    every private, writable, anonymous mapping (no file; the ``[heap]`` included, the main ``[stack]`` and the
    kernel's own pages not; threads' stacks are unnamed, so they are in) whose aligned part is at least
    ``least`` bytes: where a process's weights, caches and buffers live when it loaded them into memory of
    its own rather than mapping a file."""
    spans = []
    for line in maps.splitlines():
        fields = line.split()
        if len(fields) < 5 or len(fields[1]) != 4:
            continue
        name = fields[5] if len(fields) > 5 else ""
        if (name and name != "[heap]") or fields[1][1] != "w" or fields[1][3] != "p":
            continue
        lo, _, hi = fields[0].partition("-")
        start = -(-int(lo, 16) // HUGE_PAGE) * HUGE_PAGE
        end = int(hi, 16) // HUGE_PAGE * HUGE_PAGE
        if end - start >= least:
            spans.append((start, end))
    return spans


def huge_pages() -> int:
    """Ask the kernel to back this process's large anonymous mappings with 2 MB pages (``madvise``:
    ``MADV_HUGEPAGE``, then ``MADV_COLLAPSE``, which moves what is resident now onto huge pages at once);
    returns the bytes of this process on huge pages after it (``AnonHugePages``, also where it did nothing).
    Contents never change; a piece the kernel cannot collapse (no free huge page, memory pinned; the brk
    heap, where this kernel answered EINVAL) keeps its pages. Later faults in an advised span take whole 2 MB
    pages (~30 MB more resident for SmolLM2, thp.txt). Nothing is done where ``FASTFORWARD_HUGE_PAGES=0``,
    where the kernel's THP mode is ``never``, or where there is no Linux ``madvise``.

    The spans are advised in pieces of :data:`COLLAPSE_PIECE`: ``MADV_COLLAPSE`` stops at the first huge
    page it cannot allocate and fails the whole call (the int8 1.5B's 1.9 GB packages: every call failed and
    the count read 0 while pieces had been collapsed), so one failure costs one piece, not the span. A
    later pass finds room the one before made (each collapsed piece frees its 4 KB pages): the int8 1.5B with
    four buckets had 3.91 GB on huge pages after one pass and 10.37 GB when the passes stopped (6.5 s in
    all; SmolLM2 bf16's six buckets: 2.56 GB in 3.4 s). The passes stop when one moves less than a piece.

    Why: a compiled package's weights are read whole at every step, and they were on 4 KB pages (THP is
    ``madvise`` on these machines and nothing in torch or inductor advises it): ~70k pages for SmolLM2's
    bf16 weights, each a TLB miss, and in a KVM guest a miss walks two page tables. llama.cpp maps its GGUF
    from the page cache, which this kernel keeps in huge folios (``FileHugePages`` in /proc/meminfo).
    SmolLM2 bf16 compiled AR, 4 HumanEval prompts, on a 2-vCPU AMD EPYC (results/compiled_s48/thp.txt):
    68.8-79.9 tok/s on 4 KB pages, 79.0-85.3 after this call, in three alternating pairs of processes (+6.5-9.2%),
    for ~2 s collapsing ~0.9 GB once."""
    if os.environ.get(HUGE_PAGES_ENV, "1") == "0" or thp_mode() in (None, "never"):
        return anon_huge_bytes()  # what the kernel gave by itself (THP ``always``), said as it is
    madvise = _madvise()
    if madvise is None:
        return anon_huge_bytes()
    try:
        with open("/proc/self/maps") as f:
            spans = anonymous_spans(f.read())
    except OSError:
        return anon_huge_bytes()
    spans = [(a, b) for a, b in spans if madvise(a, b - a, MADV_HUGEPAGE) == 0]
    now = anon_huge_bytes()
    for _ in range(COLLAPSE_PASSES):
        for start, end in spans:
            for at in range(start, end, COLLAPSE_PIECE):
                madvise(at, min(COLLAPSE_PIECE, end - at), MADV_COLLAPSE)
        before, now = now, anon_huge_bytes()
        if now - before < COLLAPSE_PIECE:  # nothing more to move (or no room for it)
            break
    return now


def anon_huge_bytes(rollup: Path = Path("/proc/self/smaps_rollup")) -> int:
    """This process's anonymous memory on transparent huge pages (``AnonHugePages``, bytes); 0 where the
    kernel does not say."""
    try:
        with open(rollup) as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    return 0


@functools.cache
def _madvise() -> Callable[[int, int, int], int] | None:
    """libc's ``madvise``, looked up once; None where there is none."""
    return _libc_function("madvise", [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int])


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """:func:`freeze_heap` for the duration (a bench's timed generations); the heap is thawed after unless
    it was frozen already (a server that froze at start-up stays frozen)."""
    already = gc.get_freeze_count() > 0
    freeze_heap()
    try:
        yield
    finally:
        if not already:
            gc.unfreeze()
