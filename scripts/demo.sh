#!/usr/bin/env bash
# The main job on the bundled examples: build an index of examples/docs, then query it; then
# index the evaluation set examples/eval and measure it (lgpt-index eval, docs/eval.md).
# Uses vidore/colpali-v1.3 when it is cached (or downloadable); otherwise falls back
# to a small random-weight checkpoint, and says so: its rankings mean nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh || exit $?
lgpt=.venv/bin/lgpt-index
model=${LGPT_DEMO_MODEL:-vidore/colpali-v1.3}

"$lgpt" build examples/docs --name demo --model "$model"
rc=$?
if [ "$rc" -eq 4 ]; then
  cat >&2 <<'MSG'

==============================================================================
 The model is not available on this machine (no cache, no hub access).
 Falling back to a tiny checkpoint with RANDOM WEIGHTS, made here, so that the
 whole pipeline still runs: conversion, rendering, byaldi loading, encoding,
 the index on disk and the query. The rankings below are NOT meaningful.
==============================================================================

MSG
  model=.demo-model/tiny-colpali
  [ -f "$model/config.json" ] || .venv/bin/python scripts/make_checkpoint.py tiny "$model" >/dev/null || exit 1
  "$lgpt" build examples/docs --name demo --model "$model" --rebuild
  rc=$?
fi
[ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || exit "$rc"
"$lgpt" status --name demo
"$lgpt" query --name demo -k 5 "What was the revenue in the third quarter?"
# The bundled evaluation set: its own index, then how well it answers the set's 16 questions.
"$lgpt" build examples/eval/docs --name demo-eval --model "$model"
rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || exit "$rc"
"$lgpt" eval examples/eval/queries.jsonl --name demo-eval
