#!/usr/bin/env bash
# Issue 32, session 39: session 35's 1.5B pair run (results/compiled_s35/run_qwen.sh, its needs and comments), again
# with int8 GEMMs on inductor's AMX templates and packages without duplicate weights, written here:
#   LLAMACPP=~/.cache/fastforward/llamacpp-avx512 bash results/compiled_s39/run_qwen.sh
OUT=results/compiled_s39 exec bash results/compiled_s35/run_qwen.sh "$@"
