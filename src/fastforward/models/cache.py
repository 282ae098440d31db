"""Where converted models live and whether a cached one is usable, without importing torch.

A converted directory is complete when its marker file exists (written last, recording the SHA-256 of every
file). :func:`cache_state` adds a cheap integrity check (files present, safetensors sizes agree with their
headers), so a truncated or half-deleted cache is reported as *corrupt* with its fix instead of as ready,
and argument checks can do this before any model loads.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

_DONE = ".fastforward-complete"


def cache_root() -> Path:
    env = os.environ.get("FASTFORWARD_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "fastforward"


def compiled_dir() -> Path:
    """Where ``--compile on`` keeps its compiled forwards (AOTInductor packages, :mod:`fastforward.core.aot`)."""
    return cache_root() / "compiled"


def converted_dir(name: str) -> Path:
    return cache_root() / "models" / name


def is_pulled(name: str) -> bool:
    return (converted_dir(name) / _DONE).exists()


def _safetensors_problem(path: Path) -> str | None:
    """Why a safetensors file is unusable, from its header and size alone (None if it looks whole)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            n = int.from_bytes(f.read(8), "little")
            if n <= 0 or 8 + n > size:
                return f"{path.name} has a broken header"
            header = json.loads(f.read(n))
    except (OSError, ValueError) as e:
        return f"{path.name} cannot be read ({e})"
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + n + end != size:
        return f"{path.name} is {size} bytes, its header says {8 + n + end} (truncated or overwritten)"
    return None


def cache_problem(path: Path) -> str | None:
    """Why a converted model directory is not usable (None when it looks complete). Cheap: no hashing."""
    if not (path / _DONE).exists():
        return "the conversion did not finish (no completion marker)"
    for needed in ("config.json", "tokenizer_config.json"):
        if not (path / needed).exists():
            return f"{needed} is missing"
    weights = sorted(path.glob("*.safetensors"))
    if not weights:
        return "no .safetensors weights"
    for w in weights:
        problem = _safetensors_problem(w)
        if problem:
            return problem
    return None


def cache_state(name: str) -> tuple[str, str]:
    """(state, detail) of a registry model's cache: ready, not pulled, partial or corrupt."""
    out = converted_dir(name)
    leftovers = sorted(out.parent.glob(f".{name}-*")) if out.parent.exists() else []
    if not out.exists():
        if leftovers:
            return (
                "partial",
                f"an interrupted pull left {leftovers[0]}; run: fastforward models pull {name} --force",
            )
        return "not pulled", f"run: fastforward models pull {name}"
    problem = cache_problem(out)
    if problem is None:
        return "ready", f"at {out}"
    state = "partial" if not (out / _DONE).exists() else "corrupt"
    return state, f"{out}: {problem}; fix: fastforward models pull {name} --force"
