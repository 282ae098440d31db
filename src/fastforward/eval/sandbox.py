"""Run untrusted generated Python in a child process with CPU-time, memory and file-size limits.

Never ``exec`` in-process: a completion may loop forever, allocate without bound or call ``os._exit``.
The child runs ``python -I`` (isolated: no user site, no PYTHON* env) in a fresh temporary directory, with
``resource.setrlimit`` applied before exec; the parent also enforces a wall-clock timeout and kills the
child's whole process group. This contains accidents, not a determined attacker (no network or syscall
filtering): only score outputs of models you chose to run.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass


@dataclass(frozen=True)
class RunResult:
    passed: bool
    status: str  # "passed", "failed", "timeout"
    detail: str = ""  # last lines of stderr


def _limits(cpu_s: int, memory_bytes: int) -> None:
    os.setsid()  # own process group, so a timeout kills grandchildren too
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_python(program: str, timeout_s: float = 10.0, memory_mb: int = 1024) -> RunResult:
    """Run ``program`` as a script; passed means exit status 0 within the limits."""
    with tempfile.TemporaryDirectory(prefix="ff-sandbox-") as tmp:
        path = os.path.join(tmp, "program.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(program)
        proc = subprocess.Popen(
            [sys.executable, "-I", path],
            cwd=tmp,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin", "HOME": tmp},
            preexec_fn=lambda: _limits(max(1, int(timeout_s)), memory_mb << 20),
        )
        try:
            _, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return RunResult(False, "timeout")
        tail = err.decode("utf-8", "replace").strip().splitlines()[-3:]
        if proc.returncode == 0:
            return RunResult(True, "passed")
        if proc.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
            return RunResult(False, "timeout", "\n".join(tail))
        return RunResult(False, "failed", "\n".join(tail))
