#!/usr/bin/env bash
# FLea Table 1's FedAvg and FLea rows on UCI-HAR in one GPU call (issue #32's target; CONFIG below: another
# grid): K = 75 and 150, Qua(2) / Dir(0.3) / Dir(0.1), seeds 0-2, 100 rounds: 36 runs of
# configs/experiments/flea_table1_har.yaml, WORKERS runs at once sharing the GPU (default 16, as measured on an
# H200: studies/flea_table1_har), their clients one by one (BATCHED=true batches them: slower there), the
# longest runs first (ORDER, default longest-first; grid: as listed), then `fedaug archive` and `fedaug report`.
# A fresh RUNS folder has no round times to estimate from, so the grid lists FLea before FedAvg and K = 150
# before 75 (METHODS, KS): the first runs handed out are the long ones, and the rest go longest-first once
# their siblings have logged rounds.
# GRAPHS (default true) replays each local step as a CUDA graph (engine.cuda_graphs: on an H100 0.15 s a FedAvg
# round and 0.37 s a FLea round, against 0.46 and 1.06 eager; GRAPHS=false trains eagerly, GRAPHS=auto is the
# engine's default). MPS=1 runs the sweep under NVIDIA MPS (scripts/mps.sh), where the workers' kernels share
# the GPU at once instead of taking turns (not compared with MPS=0 yet: `STAGES="packed mps"
# scripts/gpu_check.sh` does). On an H100 (2026-11-27) WORKERS=16 GRAPHS=true MPS=1 finished the 36 runs in 223 s
# of sweep, at most 48.7 GiB of GPU memory (studies/flea_table1_har/h100_one_call).
# The sweep stops after LIMIT seconds (default 520) so the report and the archive still come back; a sweep cut
# short resumes where it stopped when run again with the same RUNS.
# SETS adds config overrides, space-separated (e.g. SETS="train.rounds=2 train.local_epochs=1").
# Another paper grid: CONFIG names its preset and GRIDS its --grid axes, separated by ';' (default: the preset's
# own grid; for flea_table1_har the seeds, methods and K above), BASELINE the report's baseline (default fedavg;
# empty: none), e.g.
#   CONFIG=configs/experiments/fedaugmix_table3_mnist.yaml GRIDS="seed=[0, 1]" BASELINE= scripts/gpu_grid.sh
#   OUT=gpu_out scripts/gpu_grid.sh                       # on the GPU machine
#   OUT=/tmp/g LIMIT=60 DEVICE=cpu WORKERS=2 SEEDS=0 scripts/gpu_grid.sh   # a quick check anywhere
# tests/smoke/test_gpu_scripts.py runs it on the CPU (6 runs of 2 rounds) and reads its files back.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
RUNS=${RUNS:-/tmp/gpu_grid_runs}
mkdir -p "$OUT" "$RUNS"
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
sets=()
for item in ${SETS:-}; do sets+=(--set "$item"); done
: > "$OUT/grid.log"  # then appended to: worker processes that outlive the sweep must not overwrite lines
if [[ "${MPS:-0}" == 1 ]]; then scripts/mps.sh start >> "$OUT/grid.log" 2>&1 || echo "MPS did not start: without it" >> "$OUT/grid.log"; fi
start=$(date +%s)
smi=  # the GPU's used memory every 2 s, its maximum appended to grid.log (the file itself stays here)
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 2000 > /tmp/gpu_grid_mem.csv 2>&1 &
  smi=$!
fi
CONFIG=${CONFIG:-configs/experiments/flea_table1_har.yaml}
grids=()
if [[ -z "${GRIDS+set}" && "$CONFIG" == configs/experiments/flea_table1_har.yaml ]]; then
  GRIDS="seed=[${SEEDS:-0, 1, 2}];method=[${METHODS:-flea, fedavg}];partition.num_clients=[${KS:-150, 75}]"
fi
IFS=';' read -r -a axes <<< "${GRIDS:-}"
for axis in "${axes[@]}"; do [[ -n "${axis// }" ]] && grids+=(--grid "$axis"); done
name=$(python3 -c 'import sys; from fedaug.sweeps.sweep import read_sweep; print(read_sweep(sys.argv[1])[0]["name"])' "$CONFIG")
timeout "${LIMIT:-520}" python3 -m fedaug sweep "$CONFIG" "${grids[@]}" \
    --set "engine.batched_clients=${BATCHED:-false}" --set "engine.cuda_graphs=${GRAPHS:-true}" \
    --set engine.progress=false "${sets[@]}" \
    --device "${DEVICE:-cuda}" --workers "${WORKERS:-16}" --order "${ORDER:-longest-first}" \
    --heartbeat 60 --out-dir "$RUNS" >> "$OUT/grid.log" 2>&1
echo "sweep exit $? after $(( $(date +%s) - start )) s" >> "$OUT/grid.log"
if [[ -n "$smi" ]]; then
  kill "$smi"
  echo "GPU memory used during the sweep, max MiB: $(sort -n /tmp/gpu_grid_mem.csv | tail -1)" >> "$OUT/grid.log"
fi
if [[ "${MPS:-0}" == 1 ]]; then scripts/mps.sh stop >> "$OUT/grid.log" 2>&1; fi
python3 -m fedaug archive --include-unfinished "$RUNS/$name" --out "$RUNS/archive" >> "$OUT/grid.log" 2>&1
baseline=()
if [[ -n "${BASELINE-fedavg}" ]]; then baseline=(--baseline "${BASELINE-fedavg}"); fi
python3 -m fedaug report "$RUNS/archive" --include-unfinished "${baseline[@]}" --format md,csv --out "$OUT/report" \
    >> "$OUT/grid.log" 2>&1
tar czf "$OUT/grid_runs.tgz" -C "$RUNS" archive
tail -5 "$OUT/grid.log"
