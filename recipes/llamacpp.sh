#!/usr/bin/env bash
# llama.cpp as the measuring stick (issue "At the hardware limit", item 3): build it once from the sources
# vendored in the llama-cpp-python sdist on PyPI, convert a registry model's shipped GGUF (default: the
# embedded SmolLM2) to F32 / BF16 / Q8_0 with its llama-quantize, and time token generation (tg) and k-token
# batches (pp) with llama-bench on 2 threads. Never a runtime dependency: nothing in fastforward imports it;
# `fastforward bench --llamacpp` runs these binaries as reference rows when asked.
#
#   bash recipes/llamacpp.sh build     # ~12 min on 2 cores, into $LLAMA (default $FASTFORWARD_CACHE/llamacpp)
#   bash recipes/llamacpp.sh convert   # $MODEL-{F32,BF16,Q8_0}.gguf next to the build ($KINDS picks types)
#   bash recipes/llamacpp.sh bench     # llama-bench tg64 and pp1/2/4/8/16/32 per precision, JSON lines on stdout
#
#   MODEL=qwen2.5-coder-1.5b KINDS="BF16 Q8_0" bash recipes/llamacpp.sh convert   # another registry model
#
# ISA=avx2 builds for AVX2 only (no AVX-512, no AMX: the reference for a run under the AVX2 cap,
# ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2) into its own folder (default $LLAMA-avx2), whose convert
# links another build's GGUFs (the native folder's or another ISA's) when they are there; pass that folder
# to `fastforward bench --llamacpp DIR`.
# ISA=avx512: AVX-512 (VBMI, VNNI, BF16) without AMX, for a virtual machine that lists AMX but whose native
# build crashed on quantized weights (SIGILL/SIGSEGV in its AMX path on the session-35 Xeon; F32 ran).
set -euo pipefail

CACHE=${FASTFORWARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fastforward}
ISA=${ISA:-native}
NATIVE_DIR=$CACHE/llamacpp
if [ "$ISA" = native ]; then LLAMA=${LLAMA:-$NATIVE_DIR}; else LLAMA=${LLAMA:-$NATIVE_DIR-$ISA}; fi
case "$ISA" in
  native) ISA_FLAGS=(-DGGML_NATIVE=ON) ;;
  avx2) ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF
    -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF
    -DGGML_AMX_BF16=OFF -DGGML_AVX_VNNI=OFF) ;;
  avx512) ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON
    -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF
    -DGGML_AMX_BF16=OFF) ;;
  *) echo "ISA must be native, avx512 or avx2, got '$ISA'" >&2; exit 2 ;;
esac
VERSION=${VERSION:-0.3.36}
PY=${PY:-.venv/bin/python}
SRC=$LLAMA/llama_cpp_python-$VERSION/vendor/llama.cpp
BIN=$SRC/build/bin
MODEL=${MODEL:-smollm2-135m}
KINDS=${KINDS:-F32 BF16 Q8_0}
gguf() {  # the GGUF $MODEL's wheels ship, as one file (chunked models are assembled once into $LLAMA)
  "$PY" -c 'import sys, pathlib
from fastforward.models.loading import shipped_gguf
print(shipped_gguf(sys.argv[1], pathlib.Path(sys.argv[2])))' "$MODEL" "$LLAMA"
}
THREADS=${THREADS:-2}

build() {
  mkdir -p "$LLAMA"
  if [ ! -d "$SRC" ]; then
    if [ -f "$NATIVE_DIR/llama_cpp_python-$VERSION.tar.gz" ] && [ "$LLAMA" != "$NATIVE_DIR" ]; then
      cp "$NATIVE_DIR/llama_cpp_python-$VERSION.tar.gz" "$LLAMA/"
    else
      "$PY" -m pip download "llama-cpp-python==$VERSION" --no-deps --no-binary :all: -d "$LLAMA" -q
    fi
    tar xzf "$LLAMA/llama_cpp_python-$VERSION.tar.gz" -C "$LLAMA"
  fi
  cmake -S "$SRC" -B "$SRC/build" -DCMAKE_BUILD_TYPE=Release "${ISA_FLAGS[@]}" -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF > "$LLAMA/cmake.log"
  cmake --build "$SRC/build" -j"$THREADS" --target llama-bench llama-completion llama-quantize \
    llama-speculative-simple > "$LLAMA/build.log"
  echo "built: $BIN"
}

convert() {
  local GGUF=${GGUF:-$(gguf)}
  for q in $KINDS; do
    for other in "$NATIVE_DIR" "$NATIVE_DIR"-*; do  # another build's conversion: the same weights, whatever the build
      if [ "$other" != "$LLAMA" ] && [ -f "$other/$MODEL-$q.gguf" ] && [ ! -L "$other/$MODEL-$q.gguf" ] \
        && [ ! -e "$LLAMA/$MODEL-$q.gguf" ]; then
        ln -s "$other/$MODEL-$q.gguf" "$LLAMA/$MODEL-$q.gguf"
      fi
    done
    [ -f "$LLAMA/$MODEL-$q.gguf" ] || LD_LIBRARY_PATH=$BIN "$BIN/llama-quantize" --allow-requantize \
      "$GGUF" "$LLAMA/$MODEL-$q.gguf" "$q" > "$LLAMA/quantize-$MODEL-$q.log" 2>&1
    echo "converted: $LLAMA/$MODEL-$q.gguf"
  done
}

bench() {
  for q in $KINDS; do
    LD_LIBRARY_PATH=$BIN "$BIN/llama-bench" -m "$LLAMA/$MODEL-$q.gguf" -t "$THREADS" -n 64 -p 1,2,4,8,16,32 \
      -r 5 -o jsonl
  done
}

[ -x "$BIN/llama-bench" ] || [ "${1:-}" = build ] || { echo "llama.cpp is not built: bash recipes/llamacpp.sh build" >&2; exit 2; }
case "${1:-bench}" in
  build) build ;;
  convert) convert ;;
  bench) convert >&2; bench ;;
  *) echo "usage: bash recipes/llamacpp.sh build|convert|bench" >&2; exit 2 ;;
esac
