#!/usr/bin/env bash
# A GPU window's one command: the campaign's next runs (studies/campaign.yaml, in its order), as many as BUDGET
# seconds hold (default 540, for a command limit of 600), packed WORKERS at once (default: the campaign file's,
# 16 on a GPU) under NVIDIA MPS when scripts/mps.sh starts it (MPS=0: never), then archived. Into OUT it writes
# at most 8 files, what a lent machine returns: one <study>.tar.gz per study with finished runs (at most 6),
# campaign.log and campaign_summary.json (each run's status, estimate and measured seconds; a run the budget
# cut is listed there and never archived).
#   OUT=$OUT scripts/gpu_campaign.sh                       # on the GPU machine (the run tool's timeout_s 600)
#   fedaug campaign import FILES_AT && fedaug campaign status   # back here, then commit studies/
# Grids that need data (the CIFAR-10 JPEG copy) run when their folder is under DATA (default data: copy
# ../shared/data/cifar10_jpeg_lossy into ./data and name data in the run tool's carry); the log's first lines
# say how much of the machine's 64 MiB the tree and that data leave, and which grids were passed over.
# BEFORE: a command run first (e.g. BEFORE="scripts/gpu_throughput.sh 150", a speed probe), with OUT set to
# $OUT/probe; what it writes there comes back as ONE file, $OUT/probe.tgz (not *.tar.gz: the import leaves it
# alone), and the campaign then writes at most 5 archives, so the 8 files still hold. Its time comes off
# BUDGET. SETS: more config overrides for every run, space-separated; only ones that leave results alone
# (engine.*, e.g. SETS="engine.cuda_graphs=false"): `fedaug campaign import` refuses runs off their grid point.
#   OUT=/tmp/c DEVICE=cpu MPS=0 BUDGET=60 CAMPAIGN=/tmp/tiny.yaml scripts/gpu_campaign.sh   # a CPU check
# tests/smoke/test_gpu_scripts.py runs it on the CPU with a tiny campaign file.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
BUDGET=${BUDGET:-540}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
start=$(date +%s)
export PYTHONPATH="src:.:.gpu_deps${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
archives=()
if [[ -n "${BEFORE:-}" ]]; then
  mkdir -p "$OUT/probe"
  OUT="$OUT/probe" bash -c "$BEFORE"
  echo "BEFORE exit $? after $(($(date +%s) - start)) s"
  tar czf "$OUT/probe.tgz" -C "$OUT" probe && rm -rf "$OUT/probe"
  archives=(--max-archives 5)
fi
if [[ "${MPS:-1}" == 1 ]]; then scripts/mps.sh start || echo "MPS did not start: runs take turns on the GPU"; fi
sets=()
for item in ${SETS:-}; do sets+=(--set "$item"); done
workers=()
if [[ -n "${WORKERS:-}" ]]; then workers=(--workers "$WORKERS"); fi
# the archives and the summary take a few seconds after the budget: 15 s kept for them
left=$((BUDGET - ($(date +%s) - start) - 15))
if ((left > 10)); then
  python3 -m fedaug campaign run --campaign "${CAMPAIGN:-studies/campaign.yaml}" --budget "$left" \
      --device "$DEVICE" --out "$OUT" --runs-dir "${RUNS:-runs/campaign}" --data-dir "${DATA:-data}" \
      "${workers[@]}" "${sets[@]}" "${archives[@]}"
  echo "campaign exit $? after $(($(date +%s) - start)) s"
else
  echo "no time left for the campaign after BEFORE ($left s)"
fi
if [[ "${MPS:-1}" == 1 ]]; then scripts/mps.sh stop; fi
ls -la "$OUT"
