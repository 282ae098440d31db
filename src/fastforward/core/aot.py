"""Compiled forwards kept on disk: one AOTInductor package per (model, width bucket, hidden states, cache size).

Why: the compiled CPU forward is fast because inductor freezes the weights and lays them out for its own
GEMM micro-kernels (SmolLM2-135M fp32, 2-core AVX-512 EPYC: 14-16 ms per 1-token forward against ~40 eager).
Those laid-out weights are mkldnn tensors, which inductor cannot pickle, so ``torch.compile`` skips its
on-disk graph cache for exactly these graphs and every new process lowers every bucket again (~55 s of a
first compile's ~80 s per bucket there; results/compile_startup). AOTInductor compiles the same frozen
forward ahead of time into a shared library with the laid-out weights inside; a new process loads it in a
few seconds and runs it at the same speed (measured: the 1-token package built in ~65-100 s, loaded
by a new process in 0.5-1.5 s, 16.3 ms against 40.8 eager per forward).

How: :class:`Step` is the engine's forward (:func:`fastforward.core.call.model_call`) over a
:class:`fastforward.core.cache.FixedCache` whose key/value buffers are *inputs*, written in place by the
package, so one package serves every request whose row fits that cache size. It is exported with
``torch.export`` (non-strict: transformers' Python runs as written) and compiled with
``aoti_compile_and_package``. Packages live under ``<store>/<fingerprint>/``; the fingerprint covers what
changes the compiled code or its weights (:func:`fingerprint`), so a changed model, dtype, weight format,
torch, transformers or CPU ISA builds anew instead of loading a stale package. A package is written to a
temporary name and renamed when whole, so two processes building the same one never leave a torn file.

Weights shared by the buckets (``shared``, float32 models): each package is built with its laid-out
weights beside the library instead of inside it (``data/weights``, one pickled tensor per file), and
:func:`load` gives every loaded package of a process the same tensor for each weight file whose contents
match (:class:`WeightPool`), so the buckets of one model read one copy of the weights.

Why: with a copy per bucket, the steps of one width evicted the other widths' copies from the CPU's
caches. On a 2-core AMX Xeon with a 480 MB L3 (SmolLM2 fp32), a 1-token step cost 31-34 ms in a run of
1-token steps and 60-130 ms after 10-20 steps of another package; the same happened after 10-20 steps of
a *second copy of the same 1-token package* (62 and 80 ms), so it is the copies, not the widths
(results/compiled_s34/switch.txt). A decoder that mixes widths (a drafted block, then AR steps) paid it at
every switch. Sharing needs the weights as plain tensors: oneDNN-prepacked (mkldnn) weights cannot be
pickled, so these packages are built with ``cpp.weight_prepack`` off, and their GEMMs run as ATen's
(MKL) matmuls over the plain weights, which inductor's GEMM templates only take prepacked. Measured
there: the 1- and 16-token steps cost what the templates' did, the 8-token step more
(results/compiled_s34/switch.txt). bfloat16 models, whose GEMMs run on oneDNN's prepacked kernels
(:func:`fastforward.core.compiled.gemm_backends`), int8/int4 weights, and float32 weights too large to stay
in the CPU's last-level cache (where sharing saves nothing and costs the templates' kernels: 2.5x on the
1-token step of an AMD EPYC with a 32 MB L3) keep a copy per package
(:func:`fastforward.core.compiled.shares_weights`).

Cost on disk: each package still holds its own copy (0.66 GB per bucket for SmolLM2-135M fp32, 0.54 GB
of parameters); in memory a process holds one copy per distinct weight. Deleting ``<store>`` only costs the
next run its compile.

The store is bounded (:func:`trim`): every change to the traced code, the model, its weights or torch gives
a new fingerprint, and the old folders were never read again. Sessions of development had left 47 GB of
them (30 folders, 0.2-12 GB each), and the disk filled. After each build the least recently used folders
go until the store fits its bound (:func:`fastforward.core.memory.store_limit`: ``FASTFORWARD_COMPILED_GB``,
else half of the free disk plus the store, at least 8 GB); the folders this process uses, and any used in the
last ten minutes (another process may be running them), stay whatever their size.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
import warnings
import weakref
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from fastforward.core.cache import FixedCache, FixedLayer

FORMAT = 3  # bump when Step's inputs or outputs change (the traced code's own source is hashed anyway)
SAMPLE = 4096  # values hashed per weight tensor, at fixed pseudo-random positions over all of it
# the code a package holds besides transformers' (whose version is hashed): a change to any of it rebuilds
TRACED = (
    "fastforward.core.aot",
    "fastforward.core.cache",
    "fastforward.core.call",
    "fastforward.core.compiled",
    "fastforward.core.int8_gemm",
)


def tensor_sample(t: torch.Tensor) -> bytes:
    """A tensor's shape, dtype, the float64 sum of all its values and :data:`SAMPLE` of them at fixed
    pseudo-random positions spread over all of it (all of them when it is smaller), as bytes. Not a hash of
    every byte, which costs seconds per start for a 1.5B model: the sum (one pass at memory speed) moves
    with any single changed weight, and the sample sees values moved without changing the sum."""
    head = f"{tuple(t.shape)}:{t.dtype}:{t.layout}".encode()
    if t.is_meta or t.is_quantized or t.layout != torch.strided or t.numel() == 0:
        return head  # nothing readable to sample: the shape and type stand for it
    flat = t.detach().reshape(-1)
    total = flat.sum(dtype=torch.float64 if flat.is_floating_point() else torch.int64)  # no widened copy
    head += f":{total.item()!r}".encode()
    if flat.numel() > SAMPLE:
        gen = torch.Generator().manual_seed(flat.numel())
        flat = flat[torch.randint(flat.numel(), (SAMPLE,), generator=gen, device="cpu").to(flat.device)]
    data = flat.contiguous().cpu()
    return head + data.view(torch.uint8).numpy().tobytes()


def tensor_digest(t: torch.Tensor) -> str:
    """:func:`tensor_sample`, hashed: what a module keeps of weights it no longer holds as a tensor of its
    state dict (oneDNN-prepacked linears), so :func:`fingerprint` still tells two such models apart."""
    return hashlib.sha256(tensor_sample(t)).hexdigest()


def traced_modules(model: torch.nn.Module) -> list[str]:
    """The modules of our code a package of ``model`` holds: :data:`TRACED`, and the module of every class of
    ours inside the model (the int8/int4 linears of ``--weights``, prepacked linears, a float32 head, a
    restricted draft head), whose forwards are traced into the package as much as the engine's own.

    Why the model's own: before session 46 only :data:`TRACED` was hashed, so a change to, say,
    ``Int8Linear.forward`` left every int8 package's fingerprint as it was and the next run loaded the stale
    compiled code."""
    ours = {type(m).__module__ for m in model.modules() if type(m).__module__.startswith("fastforward.")}
    return [*TRACED, *sorted(ours - set(TRACED))]


def _code_digest(model: torch.nn.Module) -> str:
    """A hash of the source of :func:`traced_modules`: the cache layers, attention, model call and our layers
    a package holds."""
    import importlib
    import inspect

    h = hashlib.sha256()
    for name in traced_modules(model):
        h.update(inspect.getsource(importlib.import_module(name)).encode())
    return h.hexdigest()


def fingerprint(model: torch.nn.Module, *extra: object) -> str:
    """A short hash naming everything a package's code and weights depend on: the model's class, config
    (attention implementation included), weights (every state-dict tensor, sampled, and the digests that
    prepacked layers keep of theirs), kernel path, quantization and float32 head, the device, torch and
    transformers versions, our traced code (:func:`traced_modules`), the flags our compiler front adds
    (:func:`fastforward.core.cxx.kernel_flags`), the CPU (:func:`~fastforward.hardware.isa_key`:
    its name, the feature flags this process may use and the ISA cap; inductor compiles for the machine it
    runs on, so a package from another CPU of the same torch capability could hold instructions this one
    lacks), the thread count the GEMMs were tuned
    for, :data:`FORMAT`, and ``extra``. The model's path is left out: the same weights from another
    directory load the same packages."""
    import transformers

    from fastforward.core.cxx import kernel_flags
    from fastforward.hardware import isa_key

    h = hashlib.sha256()
    config = getattr(model, "config", None)
    described = json.loads(config.to_json_string(use_diff=False)) if config is not None else {}
    described.pop("_name_or_path", None)
    param = next(model.parameters(), None)
    parts = [
        FORMAT,
        type(model).__qualname__,
        described,
        getattr(config, "_attn_implementation", None),
        getattr(model, "fastforward_path", None),
        getattr(model, "fastforward_weights", None),
        getattr(model, "fastforward_fp32_logits", None),
        None if param is None else param.device.type,
        torch.__version__,
        transformers.__version__,
        _code_digest(model),
        isa_key(),
        torch.get_num_threads(),
        kernel_flags(),
        *extra,
    ]
    h.update(json.dumps(parts, default=str, sort_keys=True).encode())
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(tensor_sample(t) if isinstance(t, torch.Tensor) else repr(t).encode())
    for name, module in model.named_modules():
        digest = getattr(module, "weight_digest", None)
        if digest is not None:
            h.update(f"{name}:{digest}".encode())
    return h.hexdigest()[:16]


class Step(torch.nn.Module):
    """The decode forward over a fixed cache whose buffers are inputs: ``(ids [1, k], pos [1, k], mask
    [1, 1, k, size], where [k], *kv)`` -> logits (and the last layer's hidden states when ``hidden``), with
    ``kv`` = each layer's keys then values ``[1, H, size, D]``, written at slots ``where`` in place."""

    def __init__(self, model: torch.nn.Module, call: Callable[..., Any], size: int, hidden: bool) -> None:
        super().__init__()
        self.model, self.size, self.hidden = model, size, hidden
        self._call = call

    def forward(
        self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, where: torch.Tensor, *kv: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        cache = FixedCache(self.size)
        cache.slots.where = where
        for keys, values in zip(kv[0::2], kv[1::2], strict=True):
            layer = FixedLayer(self.size, cache.slots)
            layer.keys, layer.values = keys, values
            layer.dtype, layer.device, layer.is_initialized = keys.dtype, keys.device, True
            cache.layers.append(layer)
        out = self._call(self.model, ids, pos, mask, cache, hidden=self.hidden)
        return (out.logits, out.hidden_states[-1]) if self.hidden else (out.logits,)


def cache_buffers(cache: FixedCache) -> list[torch.Tensor]:
    """The fixed cache's buffers in :class:`Step`'s order: layer 0's keys, layer 0's values, layer 1's keys,
    and so on."""
    return [t for layer in cache.layers for t in (layer.keys, layer.values)]


RECENT_S = 600.0  # a folder used this recently may be in use by another process: never trimmed
USED = ".used"  # touched in a fingerprint's folder whenever one of its packages is loaded or built
_IN_USE: set[Path] = set()  # the fingerprint folders this process has loaded from or built into


def to_trim(folders: list[tuple[str, int, float]], limit: int, now: float, keep: set[str]) -> list[str]:
    """Which folders to delete, least recently used first, so that the rest fit in ``limit`` bytes.

    ``folders``: (name, bytes, last used as a Unix time). Folders in ``keep`` or used within
    :data:`RECENT_S` of ``now`` are never chosen (they count towards the total all the same, so a store whose
    live folders alone exceed the bound keeps them and loses every other)."""
    total = sum(size for _, size, _ in folders)
    chosen = []
    for name, size, used in sorted(folders, key=lambda f: f[2]):
        if total <= limit:
            break
        if name in keep or now - used < RECENT_S:
            continue
        chosen.append(name)
        total -= size
    return chosen


def mark_used(folder: Path) -> None:
    """Record that ``folder``'s packages are in use now (by this process, and as of now for others)."""
    _IN_USE.add(folder.resolve())
    with contextlib.suppress(OSError):
        (folder / USED).touch()


def _last_used(folder: Path) -> float:
    """When a folder's packages were last loaded or built (its stamp, else its newest file)."""
    stamp = folder / USED
    if stamp.exists():
        return stamp.stat().st_mtime
    return max((f.stat().st_mtime for f in folder.iterdir()), default=folder.stat().st_mtime)


def trim(store: Path, limit: int | None = None) -> tuple[list[tuple[Path, int]], int]:
    """Delete the store's least recently used fingerprint folders until it fits ``limit`` bytes (default
    :func:`fastforward.core.memory.store_limit`, sized by the free disk); returns what went, with sizes, and
    the bound. Folders this process uses stay (module docstring)."""
    import shutil

    from fastforward.core.memory import store_limit

    folders, sizes = [], {}
    for folder in (p for p in store.iterdir() if p.is_dir()) if store.is_dir() else ():
        try:
            sizes[folder.name] = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
            folders.append((folder.name, sizes[folder.name], _last_used(folder)))
        except OSError:  # removed by another process meanwhile
            continue
    if limit is None:
        limit = store_limit(store, sum(sizes.values()))
    keep = {p.name for p in _IN_USE if p.parent == store.resolve()}
    gone = []
    for name in to_trim(folders, limit, time.time(), keep):
        shutil.rmtree(store / name, ignore_errors=True)
        gone.append((store / name, sizes[name]))
    return gone, limit


DEFAULT_MIN_CHUNK = 512  # inductor's cpp.min_chunk_size (elements per thread before a loop runs in parallel)


def serial_row_chunk(model: torch.nn.Module) -> int:
    """inductor's ``cpp.min_chunk_size`` for ``model``'s packages: more than one row of its hidden states, so
    that no graph splits a single row's reduction (a norm's sum of squares) across threads.

    Why: in a 1-token graph a norm's reduction over the hidden size is the outermost loop, and inductor runs
    a loop in parallel once each thread would get ``min_chunk_size`` elements (512 by default): each thread
    sums its part of the row and the parts are added after. A k-token graph runs the rows in parallel
    instead and sums each row in one pass, so a token's norm differs in the last bits between the widths.
    For float weights that is noise among other width differences; for W8A8, whose products are otherwise
    exact, it moves a token across an int8 rounding edge: the Qwen2.5-1.5B's 4- and 8-token graphs gave
    logits up to 1.08 from its 1-token graph's (session 52). SmolLM2 (hidden size 576 < 2 x 512) never split.
    With the chunk above the hidden size the 1.5B's widths give the same bits (session 53, a 2-layer probe:
    2.9e-6 apart before, 0 after). The cost: loops of fewer than two rows' elements run on one thread, which
    in a decoding step are the few-microsecond elementwise ones."""
    config = getattr(model, "config", None)
    hidden = int(getattr(config, "hidden_size", 0) or 0)
    return max(DEFAULT_MIN_CHUNK, hidden + 1)


def package_name(k: int, hidden: bool, size: int) -> str:
    """The file name of the package for ``k`` fed tokens (with hidden states or not) over ``size`` slots."""
    return f"k{k}{'-hidden' if hidden else ''}-s{size}.pt2"


def build(
    model: torch.nn.Module,
    call: Callable[..., Any],
    example: tuple[torch.Tensor, ...],
    hidden: bool,
    path: Path,
    autotune: bool,
    gemm: str,
    shared: bool = False,
) -> None:
    """Export and compile :class:`Step` for ``example``'s shapes into the package ``path``, written whole or
    not at all (a temporary file, flushed, then renamed). Processes building the same package take turns
    (a lock file beside it) and a later one finds it built. ``autotune``: inductor's max-autotune GEMM
    templates (where the CPU speed comes from; off for tiny test models, where it only costs time);
    ``gemm``: the GEMM backends autotuning chooses among (:func:`fastforward.core.compiled.gemm_backends`);
    ``shared``: weights kept beside the library, as plain tensors, for :func:`load` to share between
    packages (module docstring)."""
    from fastforward.core import cxx, int8_gemm  # imports inductor: only where a package is built

    ids, pos, mask, where, *kv = example
    size = int(mask.shape[-1])
    path.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(path.with_name(f".{path.name}.lock")):
        if path.exists():  # another process built it while this one waited
            return
        step = Step(model, call, size, hidden).eval()
        with torch.no_grad():  # traced on copies: tracing never writes the live cache
            args = (ids, pos, mask, where, *[t.clone() for t in kv])
            program = torch.export.export(step, args, strict=False)
        flatten_state_names(program)
        # W8A8's products over 2+ rows through oneDNN's prepacked int8 linear, which only ATen's kernel runs
        # exactly, or, where inductor's int8 template has a VNNI or AMX micro-kernel, those of a short K in the
        # shifted form on it; over 1 row in the split form on that template (core.int8_gemm)
        int8 = int8_gemm.rewritable(program.graph.nodes) and int8_gemm.vnni_usable()
        prepack = int8 and int(ids.shape[-1]) >= int8_gemm.MIN_ROWS
        templates = autotune and int8_gemm.template_kernel()
        split = int8 and not prepack and templates
        shift = prepack and templates  # short K on the template (shift_rows), the rest on ATen alone
        if prepack and not shift:
            gemm = "ATEN"
        elif split or shift:
            gemm = "CPP"
        if gemm == "CPP" and not shared:  # the templates alone: ATen's GEMMs keep their plain weights
            transpose_linear_weights(program)
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".part.pt2")
        os.close(fd)
        part = Path(name)
        try:
            # no_grad: inductor freezes the weights (and runs its freezing passes: oneDNN prepacking, the int8
            # linear rewrite) only when autograd is off as it compiles, whatever the caller's mode
            with (
                warnings.catch_warnings(),
                torch.no_grad(),
            ):  # inductor's deprecation notices are not the user's
                warnings.simplefilter("ignore", UserWarning)
                torch._inductor.aoti_compile_and_package(
                    program,
                    package_path=str(part),
                    inductor_configs={
                        "freezing": True,
                        "max_autotune": autotune,
                        "max_autotune_gemm_backends": gemm,
                        "cpp.min_chunk_size": serial_row_chunk(model),
                        # the g++ front the fingerprint names (core.cxx), set here: a thread's own settings
                        # may not hold it
                        **({"cpp.cxx": (None, front)} if (front := cxx.compiler()) is not None else {}),
                        # not shared: prepacked as inductor does by default, whatever a shared build set
                        **(SHARED_CONFIG if shared else {"cpp.weight_prepack": True}),
                        **(
                            {"post_grad_custom_post_pass": int8_gemm.PrepackInt8(split=split, shift=shift)}
                            if prepack or split
                            else {}
                        ),
                    },
                )
            with part.open("rb") as f:
                os.fsync(f.fileno())
            os.replace(part, path)
            drop_build_libraries(path)
        finally:
            part.unlink(missing_ok=True)


def flatten_state_names(program: torch.export.ExportedProgram) -> dict[str, str]:
    """Rename ``program``'s weights (parameters, buffers, tensor constants) from their module paths to flat
    names, in place (``model.layers.0.mlp.up_proj.qweight`` -> ``model_layers_0_mlp_up_proj_qweight``, the
    name AOTInductor gives the constant anyway). Returns the renames; none where two paths would flatten to
    the same name (the program is then left as exported).

    Why: when inductor's GEMM templates lay a frozen weight out for their micro-kernels, they drop the
    original constant only if the graph reads it through a ``get_attr`` whose target *is* the constant's
    name (torch 2.13, ``cpp_gemm_template.prune_tensors``). An exported program's graph reads a weight through
    its dotted module path, which never matches, so every package kept each original beside its laid-out
    copy: twice the weights, unused. Measured: SmolLM2-135M int8 334 MB per package against 196 MB through
    ATen, Qwen2.5-Coder-1.5B int8 3.56 GB against ~1.9 (results/compiled_s39/prune.txt)."""
    from torch.export.graph_signature import InputKind

    kinds = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
    signature = program.graph_signature
    specs = [s for s in signature.input_specs if s.kind in kinds and s.target and "." in s.target]
    names = {s.target: s.target.replace(".", "_") for s in specs}
    taken = {s.target for s in signature.input_specs if s.target} - set(names)
    if len(set(names.values())) < len(names) or taken & set(names.values()):
        return {}
    for spec in specs:
        store = program.state_dict if spec.target in program.state_dict else program.constants
        store[names[spec.target]] = store.pop(spec.target)
        spec.target = names[spec.target]
    for spec in signature.output_specs:  # a buffer the forward writes names its new target too
        if spec.target in names:
            spec.target = names[spec.target]
    return names


def transpose_linear_weights(program: torch.export.ExportedProgram) -> list[str]:
    """Hold each weight that only bias-free ``aten.linear`` calls read as its transpose, in place: the
    program's copy of ``W`` [out, in] becomes ``W.T`` contiguous [in, out] and each ``linear(x, W)`` becomes
    ``matmul(x, W.T)``, the same product. Returns the weights' targets. The model's own parameters are not
    touched (the program's state dict gets new tensors). A weight that anything else reads (a tied
    embedding), of another rank, or a linear with a bias (``matmul`` then ``add`` rounds twice in bf16 where
    ``linear`` rounds once) stays as it is.

    Why: inductor's GEMM templates lay a frozen weight out for their micro-kernels and drop the original only
    when they read the constant itself (:func:`flatten_state_names`). ``linear`` reads it through a transposing
    view, so every bf16 package on the templates kept each weight twice: SmolLM2-135M's 1-token package
    543 MB for 270 MB of weights, Qwen2.5-Coder-1.5B's 6.6 GB for 3.1 GB, with which its 8-token build was
    killed for want of memory on a 23.5 GiB machine (results/compiled_s41/qwen15_bf16_oom.txt)."""
    from torch.export.graph_signature import InputKind

    graph = program.graph
    kinds = (InputKind.PARAMETER, InputKind.BUFFER)
    specs = {s.arg.name: s for s in program.graph_signature.input_specs if s.kind in kinds and s.target}
    linear = torch.ops.aten.linear.default

    def reads_as_weight(user: torch.fx.Node, node: torch.fx.Node) -> bool:
        bias = user.args[2] if len(user.args) > 2 else user.kwargs.get("bias")
        return (
            user.target is linear
            and len(user.args) >= 2
            and user.args[1] is node
            and user.args[0] is not node
            and bias is None
        )

    done = []
    for node in list(graph.nodes):
        spec = specs.get(node.name)
        if node.op != "placeholder" or spec is None or not node.users:
            continue
        store = program.state_dict if spec.target in program.state_dict else program.constants
        old = store.get(spec.target)
        if not isinstance(old, torch.Tensor) or old.dim() != 2 or not old.is_floating_point():
            continue
        if not all(reads_as_weight(user, node) for user in node.users):
            continue
        new = old.detach().t().contiguous()
        store[spec.target] = (
            torch.nn.Parameter(new, requires_grad=False) if spec.kind == InputKind.PARAMETER else new
        )
        fake = node.meta["val"]
        with fake.fake_mode:
            node.meta["val"] = torch.empty(new.shape, dtype=new.dtype, device=fake.device)
            for user in list(node.users):
                with graph.inserting_before(user):
                    product = graph.call_function(torch.ops.aten.matmul.default, (user.args[0], node))
                product.meta.update({k: v for k, v in user.meta.items() if k != "val"})
                product.meta["val"] = torch.matmul(user.args[0].meta["val"], node.meta["val"])
                user.replace_all_uses_with(product)
                graph.erase_node(user)
        done.append(spec.target)
    program.graph_module.recompile()
    return done


SHARED_CONFIG = {
    "aot_inductor.package_constants_in_so": False,
    "aot_inductor.package_constants_on_disk_format": "pickle_weights",
    "cpp.weight_prepack": False,  # mkldnn-prepacked weights cannot be pickled, so cannot be shared
}
WEIGHTS_DIR = "data/weights/"  # where a shared-weights package keeps its weight files
WEIGHTS_CONFIG = "data/aotinductor/model/weights_config.json"  # weight name -> (file, shape, stride, offset)


class WeightPool:
    """The weight files of the shared-weights packages loaded in this process, one tensor per distinct file
    contents, held for as long as a loaded package uses it.

    A file is known by the names of the graph constants that view it, its size and its CRC-32 (both read
    from the package's zip directory, so a file already in the pool is never read again). The packages of
    one model differ only in the few weights their GEMM choices laid out differently; those have other
    contents, so other sizes or checksums, and the names rule out two weights of one shape that happen to
    share a checksum. Tokens equal to eager AR over every bucket are what the tests check."""

    def __init__(self) -> None:
        self._files: weakref.WeakValueDictionary[tuple[str, int, int], torch.Tensor] = (
            weakref.WeakValueDictionary()
        )

    def get(self, archive: zipfile.ZipFile, info: zipfile.ZipInfo, names: str) -> torch.Tensor:
        """The tensor of the weight file ``info`` of ``archive``, viewed by the constants ``names``."""
        import io

        key = (names, info.file_size, info.CRC)
        t = self._files.get(key)
        if t is None:
            t = torch.load(io.BytesIO(archive.read(info)), weights_only=True)
            self._files[key] = t
        return t


POOL = WeightPool()


class SharedPackage:
    """A loaded shared-weights package: calls go to its runner; holds the weight tensors the runner points
    at (it stores their addresses only: ``user_managed``)."""

    def __init__(self, runner: Any, weights: list[torch.Tensor]) -> None:
        self._runner, self._weights = runner, weights

    def __call__(self, *args: torch.Tensor) -> Any:
        return self._runner(*args)


def _with_weights(runner: Any, path: Path) -> SharedPackage:
    """Give ``runner`` (the package ``path``'s library, loaded without weights) its weights from
    :data:`POOL`."""
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        root = next(n for n in names if n.endswith(WEIGHTS_CONFIG))[: -len(WEIGHTS_CONFIG)]
        config = json.loads(z.read(root + WEIGHTS_CONFIG))
        users: dict[str, list[str]] = {}
        for weight, (name, *_) in config.items():
            users.setdefault(name, []).append(weight)
        files = {
            name: POOL.get(z, z.getinfo(root + WEIGHTS_DIR + name), ",".join(sorted(weights)))
            for name, weights in users.items()
        }
    weights = {
        weight: files[name].as_strided(shape, stride, offset)
        for weight, (name, shape, stride, offset) in config.items()
    }
    runner.load_constants(weights, check_full_update=True, user_managed=True)
    return SharedPackage(runner, list(files.values()))


def weights_apart(path: Path) -> bool:
    """Whether the package ``path`` keeps its weights beside its library (built with ``shared``), so
    :func:`load` gives them from :data:`POOL`."""
    with zipfile.ZipFile(path) as z:
        return any(n.endswith(WEIGHTS_CONFIG) for n in z.namelist())


def drop_build_libraries(package: Path) -> list[Path]:
    """Delete the shared libraries that building ``package`` left in inductor's cache directory; returns them.

    Why: AOTInductor compiles a package's library, weights inside, in its cache directory and then zips a
    copy into the package; the original stays there, used by nothing (a package is loaded from its own
    file, and a rebuild compiles afresh). That is 0.66 GB per SmolLM2 fp32 bucket: one session's builds had
    filled 18 GB of the fastforward cache's ``inductor`` folder and then the disk, and a build failed for
    want of space. The small files beside it (generated code, autotuning results) are kept."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    with zipfile.ZipFile(package) as z:
        names = {Path(n).name for n in z.namelist() if n.endswith(".so")}
    dropped = [f for name in names for f in Path(cache_dir()).glob(f"*/{name}")]
    for f in dropped:
        f.unlink(missing_ok=True)
    return dropped


@contextlib.contextmanager
def _exclusive(lock: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file ``lock`` (POSIX ``flock``; where there is none, no lock: a
    duplicate build then only costs time, since the rename is atomic)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with lock.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def load(path: Path) -> Callable[..., Any]:
    """A built package, ready to call with :class:`Step`'s inputs (returns a list of its outputs).

    Why the temporary folder: AOTInductor unpacks a package into a fresh folder under the temporary
    directory to load its library, and removes that folder only when the loaded package is destroyed. So
    every loaded package had a second copy on disk for as long as the process lived (1.9 GB per bucket for
    the int8 Qwen2.5-1.5B, 11 GB for a run's six buckets), and a killed process left its copies for good
    (session 32 found 6 GB of them in /tmp). Once loaded, the library is mapped and the folder is no longer
    read, so the package is unpacked into a folder of ours (``TMPDIR`` points there for the call) that is
    removed as soon as the load returns. A shared-weights package's library is loaded without weights and
    given them from :data:`POOL`."""
    shared = weights_apart(path)
    tempfile.gettempdir()  # Python's own temporary directory stays where it was, whatever TMPDIR does below
    with tempfile.TemporaryDirectory(prefix="fastforward-unpack-") as unpack:
        before = os.environ.get("TMPDIR")
        os.environ["TMPDIR"] = unpack
        try:
            if not shared:
                return torch._inductor.aoti_load_package(str(path))
            from torch.export.pt2_archive._package import load_pt2

            return _with_weights(
                load_pt2(str(path), load_weights_from_disk=False).aoti_runners["model"], path
            )
        finally:
            if before is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = before


def describe(store: Path, fp: str, model: torch.nn.Module) -> None:
    """Write ``<store>/<fp>/about.json``: which model, torch and ISA its packages are for (for people who
    look in the cache directory; nothing reads it back)."""
    about = store / fp / "about.json"
    if about.exists():
        return
    about.parent.mkdir(parents=True, exist_ok=True)
    config = getattr(model, "config", None)
    info = {
        "model": getattr(config, "_name_or_path", "") or type(model).__name__,
        "class": type(model).__qualname__,
        "dtype": str(next(model.parameters()).dtype),
        "weights": getattr(model, "fastforward_weights", None) or "full",
        "torch": torch.__version__,
        "isa": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "written": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    about.write_text(json.dumps(info, indent=1) + "\n")
