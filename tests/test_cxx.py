"""The compiler front inductor runs for our CPU packages (fastforward.core.cxx): what it adds, where it is
used, and that it changes what gcc makes of inductor's 8-row GEMM micro-kernel."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fastforward.core import cxx

needs_gcc = pytest.mark.skipif(cxx.real_compiler() is None, reason="inductor's compiler here is not g++")


@needs_gcc
def test_the_front_runs_the_real_compiler_with_its_flags(tmp_path: Path) -> None:
    path = cxx.front(tmp_path)
    assert path is not None and "g++" in Path(path).name  # inductor picks gcc's flags by the name
    assert cxx.front(tmp_path) == path and len(list(tmp_path.iterdir())) == 1  # written once
    # -### prints the compiler proper's command line without running it
    out = subprocess.run(
        [path, "-###", "-x", "c++", "-c", "/dev/null", "-o", "/dev/null"], capture_output=True, text=True
    )
    assert out.returncode == 0
    assert "-fno-tree-loop-distribute-patterns" in out.stderr and "max-completely-peel-times=64" in out.stderr


@needs_gcc
def test_a_front_written_into_a_relative_folder_is_named_by_its_absolute_path(monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    path = cxx.front(Path("."))
    assert path is not None and Path(path).is_absolute() and cxx.runs(path)


@needs_gcc
def test_a_front_that_cannot_run_is_not_used(tmp_path: Path) -> None:
    path = cxx.front(tmp_path)
    assert path is not None and cxx.runs(path)
    Path(path).write_text("#!/no/such/shell\n")  # as a folder mounted noexec: written, but it cannot start
    assert not cxx.runs(path) and cxx.front(tmp_path) is None


@needs_gcc
def test_a_front_removed_while_the_process_runs_is_written_again(monkeypatch, tmp_path: Path) -> None:
    path = cxx.front(tmp_path)
    assert path is not None
    monkeypatch.setattr(cxx, "chosen", lambda: path)
    Path(path).unlink()  # the cache folder cleared under a running server
    assert cxx.compiler() == path and cxx.runs(path)
    Path(path).unlink()  # and where it cannot be written again, inductor's own compiler builds
    monkeypatch.setattr(cxx, "front", lambda folder=None: None)
    assert cxx.compiler() is None


def test_no_front_where_inductor_s_compiler_is_not_gcc(monkeypatch, tmp_path: Path) -> None:
    import torch._inductor.config as inductor_config

    old = inductor_config.cpp.cxx  # inductor's settings: saved and set back by hand (monkeypatch cannot)
    try:
        monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
        inductor_config.cpp.cxx = (None, os.environ["CXX"])
        cxx.real_compiler.cache_clear()
        cxx.chosen.cache_clear()
        assert cxx.real_compiler() is None and cxx.front(tmp_path) is None
        assert cxx.chosen() is None and cxx.kernel_flags() == ()
        fake = tmp_path / "clang++"
        fake.write_text("#!/bin/sh\necho 'clang version 18.1.0'\n")
        fake.chmod(0o755)
        monkeypatch.setenv("CXX", str(fake))
        cxx.real_compiler.cache_clear()
        assert cxx.real_compiler() is None and cxx.front(tmp_path) is None
    finally:
        monkeypatch.undo()
        inductor_config.cpp.cxx = old
        cxx.real_compiler.cache_clear()
        cxx.chosen.cache_clear()


def test_the_front_s_flags_are_part_of_every_package_s_fingerprint(monkeypatch) -> None:
    from fastforward.core.aot import fingerprint
    from tests.conftest import make_tiny

    model = make_tiny("llama", vocab=96, seed=0).model
    here = fingerprint(model)
    monkeypatch.setattr(cxx, "kernel_flags", lambda: ("-O2",))
    assert fingerprint(model) != here


# the form of inductor's float32 micro-kernel (a template instantiated for 8 rows x 3 vectors): the
# accumulators in an at::vec::VectorizedN (a std::array zeroed by its constructor), one FMA each per step of K
KERNEL = r"""
#include <ATen/cpu/vec/vec.h>
#include <c10/util/Unroll.h>
template <int ROWS, int COLS>
inline void kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, long K) {
    using V = at::vec::Vectorized<float>;
    V va;
    at::vec::VectorizedN<float, COLS> vb;
    at::vec::VectorizedN<float, ROWS * COLS> vc;
    auto zero = [&](auto i) { vc[i] = V(0.0f); };
    c10::ForcedUnroll<ROWS * COLS>{}(zero);
    auto compute = [&](auto i, long k) {
        constexpr int row = i / COLS, col = i % COLS;
        if constexpr (col == 0) { va = V(A[row * K + k]); }
        if constexpr (row == 0) { vb[col] = V::loadu(B + k * COLS * 16 + col * 16); }
        vc[i] = at::vec::fmadd(va, vb[col], vc[i]);
    };
    for (long k = 0; k < K; ++k) { c10::ForcedUnroll<ROWS * COLS>{}(compute, k); }
    auto store = [&](auto i) { vc[i].store(C + i * 16); };
    c10::ForcedUnroll<ROWS * COLS>{}(store);
}
template void kernel<8, 3>(const float*, const float*, float*, long);
"""


# (rows, vectors, ISA flags): AVX-512's 8-row block (24 accumulators of 16 floats) and AVX2's 4-row block (12 of
# 8 floats): both kept every accumulator on the stack too under gcc 12 (session 66 found the AVX2 one)
BLOCKS = {
    "avx512": (
        8,
        3,
        ["-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512bw", "-mfma", "-DCPU_CAPABILITY_AVX512"],
        "zmm",
    ),
    "avx2": (4, 3, ["-mavx2", "-mfma", "-DCPU_CAPABILITY_AVX2"], "ymm"),
}


@needs_gcc
@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs objdump")
@pytest.mark.parametrize("isa", sorted(BLOCKS))
def test_through_the_front_the_gemm_kernel_keeps_its_accumulators_out_of_memory(
    tmp_path: Path, isa: str
) -> None:
    import re

    from torch.utils.cpp_extension import include_paths

    rows, cols, flags, register = BLOCKS[isa]
    src = tmp_path / "kernel.cpp"
    src.write_text(KERNEL.replace("template void kernel<8, 3>", f"template void kernel<{rows}, {cols}>"))
    common = ["-O3", "-std=c++17", *flags, *[f"-I{p}" for p in include_paths()], "-c", str(src)]

    def stack_stores(compiler: str) -> int:
        obj = tmp_path / "kernel.o"
        subprocess.run([compiler, *common, "-o", str(obj)], check=True, capture_output=True)
        asm = subprocess.run(
            ["objdump", "-d", "--no-show-raw-insn", str(obj)], capture_output=True, text=True
        ).stdout
        store = re.compile(rf"vmov\S*\s+%{register}\d+,.*\((%rsp|%rbp)\)")  # a vector register to the stack
        return sum(1 for line in asm.splitlines() if store.search(line))

    plain, front = cxx.real_compiler(), cxx.front(tmp_path)
    assert plain is not None and front is not None
    # gcc 12 writes every accumulator to the stack on every step of K; through the front none is written there
    if stack_stores(plain) < rows * cols:
        pytest.skip("this g++ keeps the accumulators in registers without the front")
    assert stack_stores(front) == 0


@needs_gcc
def test_install_makes_the_front_inductor_s_compiler_unless_the_user_chose_one(monkeypatch) -> None:
    import threading

    import torch._inductor.config as inductor_config
    from torch._inductor import cpp_builder

    monkeypatch.delenv("TORCHINDUCTOR_INSTALL_GXX", raising=False)
    old = inductor_config.cpp.cxx  # inductor's settings: saved and set back by hand (monkeypatch cannot)
    inductor_config.cpp.cxx = (None, os.environ.get("CXX", "g++"))
    cxx.chosen.cache_clear()
    try:
        path = cxx.install()
        assert path is not None and inductor_config.cpp.cxx == (None, path)
        assert cpp_builder.get_cpp_compiler() == path and cpp_builder._is_gcc(path)  # inductor runs it as g++
        # another thread sees inductor's own setting, but the same choice and so the same fingerprint
        seen: list[object] = []
        worker = threading.Thread(target=lambda: seen.extend([inductor_config.cpp.cxx, cxx.kernel_flags()]))
        worker.start()
        worker.join()
        assert seen[1] == cxx.FLAGS == cxx.kernel_flags()
        cxx.chosen.cache_clear()
        inductor_config.cpp.cxx = (None, "/opt/my/g++")  # the user's own compiler
        assert cxx.install() is None and inductor_config.cpp.cxx == (None, "/opt/my/g++")
        assert cxx.kernel_flags() == ()
    finally:
        inductor_config.cpp.cxx = old
        cxx.chosen.cache_clear()
