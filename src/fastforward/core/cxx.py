"""The C++ compiler inductor runs for our compiled CPU forwards: g++ with two optimization flags that keep the
GEMM micro-kernel's accumulators in registers.

Why (session 65, results/compiled_s65/): inductor's float32 GEMM template computes an 8-row block of an
8-token forward with 24 vector accumulators (8 rows x 3 vectors of 16 floats) held in an ``at::vec::VectorizedN``,
a ``std::array`` whose default constructor zeroes it in a loop. GCC 12 (``-O3``) peels a loop of at most 16
trips whole; this one has 24, so its "loop distribution" turns it into a ``memset`` call, the array's address
escapes, and the kernel then keeps every accumulator in a register *and* stores all 24 to the stack at every
step of K: as many 512-bit stores as FMAs. On a 2-core Zen 4 EPYC that halved the 8-row kernel's arithmetic
rate (the gate projection over 8 rows, weights in L3: 165 us against 70 us without the stores), and
SmolLM2-135M's 8-token step took 41.5 ms against 15-18 for one token (k8/k1 2.7). Built through this front,
the same package's 8-token step takes ~21 ms (k8/k1 1.14-1.5), every output bit the same (only where values
live changes, not the arithmetic). A 1-row block (3 accumulators) was never affected, hence the 1-token step
does not move.

The flags: ``-fno-tree-loop-distribute-patterns`` (no ``memset`` made of the zeroing loop) and ``--param
max-completely-peel-times=64`` (the 24-trip loop unrolled whole, so its array becomes registers). Neither
changes what a kernel computes. Inductor reads its compiler from ``torch._inductor.config.cpp.cxx`` and
has no setting for extra flags, so the front is a two-line shell script written once into inductor's cache
folder, named with ``g++`` in it (inductor chooses GCC-specific flags by the compiler's name). Where
inductor's compiler is not GCC (``$CXX`` names clang, or no g++ on the PATH), nothing changes."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

FLAGS = ("-fno-tree-loop-distribute-patterns", "--param", "max-completely-peel-times=64")


def script(real: str, flags: tuple[str, ...] = FLAGS) -> str:
    """The front's text: ``real`` (an absolute path) run with ``flags`` before the caller's arguments."""
    return (
        "#!/bin/sh\n"
        "# written by fastforward (fastforward/core/cxx.py): inductor's compiler with flags that keep its GEMM\n"
        "# micro-kernels' accumulators in registers; see that module's docstring\n"
        f'exec "{real}" {" ".join(flags)} "$@"\n'
    )


@functools.cache
def real_compiler() -> str | None:
    """The absolute path of the compiler inductor would run by default (``$CXX``, else ``g++``) when it is GCC;
    None otherwise (missing, or clang, whose loop unrolling is not the one this front adjusts)."""
    found = shutil.which(os.environ.get("CXX", "g++"))
    if found is None:
        return None
    try:
        version = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    first = version.splitlines()[0] if version else ""
    return found if "clang" not in version.lower() and ("g++" in first or "GCC" in first) else None


def kernel_flags() -> tuple[str, ...]:
    """The flags the front adds to this process's kernel builds (none where there is no front): part of every
    package's fingerprint (:func:`fastforward.core.aot.fingerprint`), so packages built before the front, or
    with other flags, are built anew instead of loaded."""
    return FLAGS if real_compiler() is not None else ()


def front(folder: Path | None = None) -> str | None:
    """The front's path, written into ``folder`` (None: inductor's cache folder) if not there yet; None where
    inductor's compiler is not GCC (:func:`real_compiler`). The name carries a hash of the text, so a changed
    compiler or flag list writes a new script and two processes never rewrite one in place."""
    real = real_compiler()
    if real is None:
        return None
    if folder is None:
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        folder = Path(cache_dir())
    text = script(real)
    path = Path(folder) / f"fastforward-g++-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".g++-front.")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)  # whole or not at all
    return str(path)
