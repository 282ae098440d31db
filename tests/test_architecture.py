"""The package's layering, as written in docs/architecture.md, holds for every import in src/fastforward.

docs/architecture.md states the dependency order in a fenced code block with the info string ``layers``:
one layer per line, lowest first, each line a whitespace-separated list of module prefixes. Modules on one
line form one layer and may import each other; a module may import from its own layer or any lower one,
never from a higher one. These tests read that block (so the doc and the code cannot drift apart silently)
and check, with ``ast`` only (nothing is imported or executed):

- every ``import x`` / ``from x import y`` / relative import, at module level or inside a function, points
  down (or sideways within a layer);
- every module under src/fastforward belongs to a listed layer (a new package must be placed in the order).

The package root (``fastforward/__init__.py``) and ``fastforward/__main__.py`` are the entry points that
dispatch to the CLI, so they are exempt as importers. Dynamic imports (``importlib.import_module``) are not
seen; imports under ``if TYPE_CHECKING:`` are counted like any other.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SRC = REPO_ROOT / "src"
PACKAGE = "fastforward"
ARCH_DOC = REPO_ROOT / "docs" / "architecture.md"
EXEMPT_IMPORTERS = frozenset({PACKAGE, f"{PACKAGE}.__main__"})

_LAYERS_BLOCK = re.compile(r"^```[ \t]*layers[ \t]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name of the file holding the import
    target: str  # dotted module name imported (the submodule when ``from pkg import submodule``)
    line: int


def read_layers(doc: Path) -> list[list[str]]:
    """The ``layers`` block of ``doc``: one list of module prefixes per layer, lowest layer first."""
    if not doc.is_file():
        pytest.fail(f"{doc} is missing: it must hold the package's layer order in a ```layers block")
    blocks = _LAYERS_BLOCK.findall(doc.read_text(encoding="utf-8"))
    assert len(blocks) == 1, f"{doc} must hold exactly one ```layers block, found {len(blocks)}"
    layers = [line.split() for line in blocks[0].splitlines() if line.strip()]
    assert layers, f"the ```layers block of {doc} is empty"
    prefixes = [p for layer in layers for p in layer]
    duplicates = sorted({p for p in prefixes if prefixes.count(p) > 1})
    assert not duplicates, f"{doc}: prefixes listed twice in the layers block: {duplicates}"
    return layers


def module_name(path: Path) -> str:
    """src/fastforward/core/sampling.py -> fastforward.core.sampling; a package's __init__ -> the package."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


def _resolve_relative(importer: str, is_package: bool, module: str | None, level: int) -> str:
    """``from ..x import y`` inside ``importer`` -> the absolute module ``..x`` names."""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    if level > 1:
        base = base[: -(level - 1)]
    return ".".join(base + ([module] if module else []))


def collect_imports(modules: dict[str, Path]) -> list[Import]:
    """Every fastforward import in every module: ``import``, ``from``, relative, at any nesting depth."""
    found: list[Import] = []
    for importer, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = (
                    _resolve_relative(importer, is_package, node.module, node.level)
                    if node.level
                    else node.module or ""
                )
                # ``from pkg import sub`` imports the submodule pkg.sub when there is one, else names of pkg.
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            for target in targets:
                if target == PACKAGE or target.startswith(PACKAGE + "."):
                    found.append(Import(importer, target, node.lineno))
    return found


def layer_of(module: str, layers: list[list[str]]) -> int | None:
    """The index of the layer whose longest prefix (on dot boundaries) matches ``module``, or None."""
    best: tuple[int, int] | None = None  # (prefix length, layer index)
    for index, layer in enumerate(layers):
        for prefix in layer:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > best[0]
            ):
                best = (len(prefix), index)
    return None if best is None else best[1]


@pytest.fixture(scope="module")
def layers() -> list[list[str]]:
    return read_layers(ARCH_DOC)


@pytest.fixture(scope="module")
def modules() -> dict[str, Path]:
    found = source_modules()
    assert len(found) > 10, f"expected the fastforward sources under {SRC}, found {sorted(found)}"
    return found


def test_imports_point_down_the_layer_order(layers: list[list[str]], modules: dict[str, Path]) -> None:
    violations: list[str] = []
    for imp in sorted(set(collect_imports(modules)), key=lambda i: (i.importer, i.line, i.target)):
        if imp.importer in EXEMPT_IMPORTERS:
            continue
        src_layer, dst_layer = layer_of(imp.importer, layers), layer_of(imp.target, layers)
        if src_layer is None or dst_layer is None:
            continue  # an unlisted module: test_every_module_belongs_to_a_layer reports it
        if dst_layer > src_layer:
            violations.append(
                f"{imp.importer} imports {imp.target} (layer {src_layer} -> {dst_layer}), "
                f"{modules[imp.importer].relative_to(REPO_ROOT)}:{imp.line}"
            )
    assert not violations, (
        f"{len(violations)} import(s) point UP the layer order of {ARCH_DOC.name}:\n" + "\n".join(violations)
    )


def test_every_module_belongs_to_a_layer(layers: list[list[str]], modules: dict[str, Path]) -> None:
    unlisted = sorted(m for m in modules if m not in EXEMPT_IMPORTERS and layer_of(m, layers) is None)
    assert not unlisted, (
        f"modules in no layer of {ARCH_DOC.name} (add them to the ```layers block): {unlisted}"
    )


def test_layer_parsing_and_prefix_matching(tmp_path: Path) -> None:
    """The helpers themselves: the block is parsed, the longest prefix wins on dot boundaries, relative
    imports resolve against the importer's package."""
    doc = tmp_path / "architecture.md"
    doc.write_text(
        "text\n```python\nx = 1\n```\n```layers\nfastforward.errors\n\nfastforward.core\n"
        "fastforward.cli   fastforward.core.x\n```\nmore text\n",
        encoding="utf-8",
    )
    layers = read_layers(doc)
    assert layers == [["fastforward.errors"], ["fastforward.core"], ["fastforward.cli", "fastforward.core.x"]]
    assert layer_of("fastforward.core.sampling", layers) == 1
    assert layer_of("fastforward.core", layers) == 1
    assert layer_of("fastforward.core.x.y", layers) == 2  # the longer prefix wins
    assert layer_of("fastforward.corex", layers) is None  # prefixes end on a dot boundary
    assert layer_of("fastforward", layers) is None
    assert _resolve_relative("fastforward.core.sampling", False, "decoder", 1) == "fastforward.core.decoder"
    assert _resolve_relative("fastforward.core", True, "decoder", 1) == "fastforward.core.decoder"
    assert _resolve_relative("fastforward.decoders.ar", False, "core", 2) == "fastforward.core"
    assert _resolve_relative("fastforward.decoders.ar", False, None, 1) == "fastforward.decoders"


# A model's forward over a KV cache is called in one place: core.call.model_call (the engine's steps and
# prefills, the compiled graphs, the draft models, the packed layout, CLLM's collector and the cost probe call
# it). A call that passes a cache anywhere else would dodge what that function guarantees.


def test_the_model_forward_is_called_from_one_function() -> None:
    pkg = Path(__file__).resolve().parents[1] / "src" / "fastforward"
    callers = {
        str(path.relative_to(pkg)): path.read_text(encoding="utf-8").count("past_key_values=")
        for path in pkg.rglob("*.py")
        if "past_key_values=" in path.read_text(encoding="utf-8")
    }
    assert callers == {"core/call.py": 2}, callers  # model_call's two branches (with and without the head)
    call = (pkg / "core" / "call.py").read_text(encoding="utf-8")
    body = call[call.index("def model_call(") : call.index("\ndef ", call.index("def model_call("))]
    assert body.count("past_key_values=") == 2


# One module (or package) per decoding method. docs/architecture.md: "methods never import each other"; what
# two methods share lives in a shared module (decoders.ngram, decoders.speculative_checks) or below, in core.
METHOD_MODULES = (
    "fastforward.decoders.ar",
    "fastforward.decoders.jacobi",
    "fastforward.decoders.lookahead",
    "fastforward.decoders.chimera",
    "fastforward.decoders.speculative",
    "fastforward.decoders.hf_generate",
    "fastforward.decoders.recycle",
    "fastforward.decoders.suffix",
)
# Modules that compose methods rather than being one: the registry builds them and `auto` times them.
COMPOSERS = ("fastforward.decoders.registry", "fastforward.decoders.auto")


def _method_of(module: str) -> str | None:
    return next((m for m in METHOD_MODULES if module == m or module.startswith(m + ".")), None)


def test_method_modules_do_not_import_each_other(modules: dict[str, Path]) -> None:
    assert all(any(name == m or name.startswith(m + ".") for name in modules) for m in METHOD_MODULES)
    violations = [
        f"{imp.importer} imports {imp.target}, {modules[imp.importer].relative_to(REPO_ROOT)}:{imp.line}"
        for imp in collect_imports(modules)
        if imp.importer not in COMPOSERS
        and _method_of(imp.importer) is not None
        and _method_of(imp.target) not in (None, _method_of(imp.importer))
    ]
    assert not violations, "method modules import each other:\n" + "\n".join(violations)
