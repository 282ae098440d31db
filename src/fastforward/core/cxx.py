"""The C++ compiler inductor runs for our compiled CPU forwards: g++ with two optimization flags that keep the
GEMM micro-kernel's accumulators in registers.

Why (session 65, results/compiled_s65/): inductor's float32 GEMM template computes an 8-row block of an
8-token forward with 24 vector accumulators (8 rows x 3 vectors of 16 floats) held in an ``at::vec::VectorizedN``,
a ``std::array`` whose default constructor zeroes it in a loop. GCC 12 (``-O3``) peels a loop of at most 16
trips whole; this one has 24, so its "loop distribution" turns it into a ``memset`` call, the array's address
escapes, and the kernel then keeps every accumulator in a register *and* stores all 24 to the stack at every
step of K: as many 512-bit stores as FMAs. On a 2-core Zen 4 EPYC that halved the 8-row kernel's arithmetic
rate (the gate projection over 8 rows, weights in L3: 165 us, against 70 us for the same kernel built
with ``-fno-exceptions``, which also drops the stores but cannot build inductor's headers), and SmolLM2-135M's
8-token step took 41.4-42.0 ms against 15 for one token (k8/k1 2.7-2.8). Built through this front, the same
package's 8-token step took 21.7-23.0 ms (k8/k1 1.18-1.23; results/compiled_s65/kc_ab_peel.jsonl), every
output bit the same by construction (only where values live changes; inductor builds with
``-ffp-contract=off`` and no unsafe math, so nothing is reassociated). A 1-row block (3 accumulators) never
had the stores; AVX2's 4-row block (12 accumulators of 8 floats) had them too (session 66, tests/test_cxx.py).

The flags: ``-fno-tree-loop-distribute-patterns`` (no ``memset`` made of the zeroing loop) and ``--param
max-completely-peel-times=64`` (the 24-trip loop unrolled whole, so its array becomes registers). Neither
changes what a kernel computes. Inductor reads its compiler from ``torch._inductor.config.cpp.cxx`` and
has no setting for extra flags, so the front is a two-line shell script written once into inductor's cache
folder, named with ``g++`` in it (inductor chooses GCC-specific flags by the compiler's name). Where
inductor's compiler is not GCC (``$CXX`` names clang, or no g++ on the PATH), where the user chose inductor's
compiler (``cpp.cxx`` changed, or ``TORCHINDUCTOR_INSTALL_GXX``), or where the front cannot be written,
nothing changes, and :func:`kernel_flags` says so to the packages' fingerprint."""

from __future__ import annotations

import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

FLAGS = ("-fno-tree-loop-distribute-patterns", "--param", "max-completely-peel-times=64")
PREFIX = "fastforward-g++-"  # the front's file name: "g++" in it, so inductor takes it for GCC


def script(real: str, flags: tuple[str, ...] = FLAGS) -> str:
    """The front's text: ``real`` (an absolute path) run with ``flags`` before the caller's arguments."""
    return (
        "#!/bin/sh\n"
        "# written by fastforward (fastforward/core/cxx.py): inductor's compiler with flags that keep its GEMM\n"
        "# micro-kernels' accumulators in registers; see that module's docstring\n"
        f'exec {shlex.quote(real)} {shlex.join(flags)} "$@"\n'
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


def is_front(compiler: object) -> bool:
    """Whether ``compiler`` (an entry of inductor's ``cpp.cxx``) is a front written by :func:`front`."""
    return isinstance(compiler, str) and Path(compiler).name.startswith(PREFIX)


def kernel_flags() -> tuple[str, ...]:
    """The flags inductor's kernels are built with in this process, as far as they change the code: the
    front's when this process builds through it (:func:`chosen`), else none. Part of every package's
    fingerprint (:func:`fastforward.core.aot.fingerprint`), so packages built before the front, without it,
    or with other flags, are built anew instead of loaded."""
    return FLAGS if chosen() is not None else ()


def front(folder: Path | None = None) -> str | None:
    """The front's path, written into ``folder`` (None: inductor's cache folder) if not there yet; None where
    inductor's compiler is not GCC (:func:`real_compiler`), or where the front cannot be written or named on
    inductor's command line (which it splits with ``shlex``: a path with spaces or quotes would break every
    build). The name carries a hash of the text, so a changed compiler or flag list writes a new script and
    two processes never rewrite one in place."""
    real = real_compiler()
    if real is None:
        return None
    if folder is None:
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        folder = Path(cache_dir())
    text = script(real)
    # absolute: inductor runs the compiler by this name, and a bare relative name would be looked up on PATH
    path = Path(folder).absolute() / f"{PREFIX}{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    if shlex.quote(str(path)) != str(path):
        return None
    if not (path.is_file() and os.access(path, os.X_OK)):
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".g++-front.")
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.chmod(tmp, 0o755)
            os.replace(tmp, path)  # whole or not at all
        except OSError:  # a read-only cache folder: inductor's own compiler, without the flags
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            return None
    return str(path) if runs(str(path)) else None


def runs(compiler: str) -> bool:
    """Whether ``compiler`` starts and answers ``--version``. A front that was written but cannot run (a
    folder mounted ``noexec``, no ``/bin/sh``) would fail every build; inductor's own compiler is used then."""
    try:
        done = subprocess.run([compiler, "--version"], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def compiler() -> str | None:
    """The front to build with now: :func:`chosen`, written again if it has gone since (a cache folder
    cleared while this process runs); None where there is none or it cannot be written again, and
    inductor's own compiler builds. (The fingerprint still names the flags then: they change where values
    live, never what a kernel computes, so a package built without them gives the same bits, only slower.)"""
    path = chosen()
    if path is None or Path(path).is_file():
        return path
    return front(Path(path).parent)


@functools.cache
def chosen() -> str | None:
    """The front this process builds its packages through, decided once (the first caller's view): None where
    the user chose inductor's compiler (``cpp.cxx`` other than inductor's default, or
    ``TORCHINDUCTOR_INSTALL_GXX``) or there is no front (:func:`front`).

    Decided once and kept here, not read back from ``cpp.cxx``: inductor's settings made by assignment are
    thread-local, so a server's worker thread saw inductor's default compiler, computed another fingerprint
    and missed the packages the main thread had stored (tests/test_serve.py). Builds pass it explicitly
    (:func:`fastforward.core.aot.build`), whatever thread they run in."""
    import torch._inductor.config as inductor_config

    current = inductor_config.cpp.cxx
    entries = tuple(current) if isinstance(current, (list, tuple)) else (current,)
    ours = [c for c in entries if is_front(c)]
    if ours:
        return str(ours[0])
    if entries != (None, os.environ.get("CXX", "g++")) or os.environ.get("TORCHINDUCTOR_INSTALL_GXX"):
        return None
    return front()


def install() -> str | None:
    """Make :func:`chosen` inductor's C++ compiler in the calling thread (graphs compiled in this process);
    its path, or None (inductor's own compiler stays)."""
    import torch._inductor.config as inductor_config

    path = compiler()
    if path is not None:
        inductor_config.cpp.cxx = (None, path)
    return path
