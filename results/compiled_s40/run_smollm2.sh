#!/usr/bin/env bash
# Issue 32, session 40: session 35's SmolLM2 fp32 run (results/compiled_s35/run_smollm2.sh: every method through
# the compiled engine beside eager AR, generate() and llama.cpp F32; 3 prompts, 128 tokens, one process per
# dataset), again with the step gate's opening deferred by the cost curve, written here:
#   TAG=amx_fp32 LLAMACPP=~/.cache/fastforward/llamacpp-avx512 bash results/compiled_s40/run_smollm2.sh
# Under the AVX2 cap (our engine only; no AVX2-only llama.cpp build on this host this session):
#   TAG=avx2cap ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 NO_LLAMACPP=1 bash results/compiled_s40/run_smollm2.sh
OUT=results/compiled_s40 exec bash results/compiled_s35/run_smollm2.sh "$@"
