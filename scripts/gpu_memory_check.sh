#!/usr/bin/env bash
# The memory of recorded steps on a GPU, in one short call (about 3 minutes). Each recorded step has a memory pool
# of its own; fedaug.training.step_graphs.release_memory returns the pools of a round's dropped recordings to the device.
# Without it FLea reserved 7 GiB in 20 rounds on an H100 and 16 packed FLea runs (scripts/gpu_grid.sh) filled
# the 80 GiB card within a minute. Three stages:
#   1. tests/gpu's graph tests, the memory test and the host-read fallback test among them (TESTS_S, 60);
#   2. benchmarks/gpu.py --modes graphs_unreleased,graphs: FedAvg and FLea alone for MEM_ROUNDS (20) rounds,
#      time per round and the memory the process reserves, without and with the release (MEM_S, 60);
#   3. packed: FLea Table 1's 18 FLea runs (3 splits, K = 150 and 75, seeds 0-2) for PACKED_ROUNDS (25) rounds,
#      WORKERS (16) at once with engine.cuda_graphs under MPS, the GPU's used memory sampled every second
#      (packed_mem.csv, MiB) (PACKED_S, 90).
#   OUT=$OUT scripts/gpu_memory_check.sh                  # on the GPU machine
#   OUT=/tmp/p DEVICE=cpu MPS=0 MEM_ROUNDS=2 PACKED_ROUNDS=1 WORKERS=2 SEEDS=0 scripts/gpu_memory_check.sh  # anywhere
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
export PYTHONPATH="src:.${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
start=$(date +%s)
elapsed() { echo "after $(($(date +%s) - start)) s"; }
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c 'import torch; print(torch.__version__)'; } > "$OUT/machine.txt" 2>&1

timeout "${TESTS_S:-60}" python3 -m pytest -q -p no:cacheprovider -o addopts="--import-mode=importlib" tests/gpu \
    -k "graphs or records or falls_back or memory" > "$OUT/tests_graphs.txt" 2>&1
echo "tests exit $? $(elapsed)" | tee -a "$OUT/tests_graphs.txt"

timeout "${MEM_S:-60}" python3 benchmarks/gpu.py --device "$DEVICE" --methods flea,fedavg \
    --modes graphs_unreleased,graphs --rounds "${MEM_ROUNDS:-20}" --out "$OUT/memory.json" > "$OUT/memory.log" 2>&1
echo "memory benchmark exit $? $(elapsed)" | tee -a "$OUT/memory.log"

smi=
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 1000 > "$OUT/packed_mem.csv" 2>&1 &
  smi=$!
fi
if [[ "${MPS:-1}" == 1 ]]; then scripts/mps.sh start >> "$OUT/packed.log" 2>&1; fi
timeout "${PACKED_S:-90}" python3 -m fedaug sweep configs/experiments/flea_table1_har.yaml \
    --grid "seed=[${SEEDS:-0, 1, 2}]" --grid "method=[flea]" --grid "partition.num_clients=[150, 75]" \
    --set "train.rounds=${PACKED_ROUNDS:-25}" --set engine.cuda_graphs=true --set engine.progress=false \
    --device "$DEVICE" --workers "${WORKERS:-16}" --out-dir /tmp/gpu_memory_packed >> "$OUT/packed.log" 2>&1
echo "packed exit $? $(elapsed)" | tee -a "$OUT/packed.log"
if [[ "${MPS:-1}" == 1 ]]; then scripts/mps.sh stop >> "$OUT/packed.log" 2>&1; fi
if [[ -n "$smi" ]]; then kill "$smi"; fi
if [[ -s "$OUT/packed_mem.csv" ]]; then echo "GPU memory used, max MiB: $(sort -n "$OUT/packed_mem.csv" | tail -1)"; fi
grep -E "runs:|FAILED" "$OUT/packed.log" | cut -c1-200 | tail -5
