#!/usr/bin/env bash
# The device checks of "Run on a GPU", in one call on a lent GPU machine (torch with CUDA, no network, no pip):
#   1. tests/gpu (every method on CUDA, CPU/CUDA draws, resume, cross-device checkpoints, bf16) and the
#      CUDA cases of the attack and Flower device tests;
#   2. FedAvg and FLea on the default preset (UCI-HAR, K = 75, Qua(2), 100 rounds, seed 0) on CUDA;
#   3. with STAGES including "speed": benchmarks/gpu.py (sequential vs batched clients vs packed runs);
#   4. with STAGES including "syncs": benchmarks/host_syncs.py (host reads and CUDA syncs per round, by line);
#   5. with STAGES including "packed": benchmarks/gpu.py --modes packed, PACKED_WORKERS (default 16) runs of
#      PACKED_ROUNDS (default 20) rounds sharing the GPU, with each phase's median round time;
#   6. with STAGES including "mps": the same under NVIDIA MPS (scripts/mps.sh; skipped without it);
#   7. with STAGES including "floor": benchmarks/engine_vs_floor.py, FedAvg's rounds against the same steps in a
#      bare forward/backward/Adam loop on the GPU (how much of a run alone is the engine, how much eager PyTorch);
#   8. with STAGES including "graphs": benchmarks/gpu.py --modes sequential,graphs,packed_graphs, one run without
#      and with engine.cuda_graphs, then PACKED_WORKERS runs with it, GRAPHS_ROUNDS (default 20) rounds each,
#      and benchmarks/host_syncs.py with engine.cuda_graphs (recording must not add syncs).
# STAGES (default "tests runs") picks the stages, e.g. STAGES="tests speed"; ROUNDS (default 100) the rounds of
# the speed stage (fewer are scaled to 100 rounds in its numbers), WORKERS (default 4) its packed runs.
# The lent machines have pytest; elsewhere build a folder of it and carry it along:
#   pip install --target .gpu_deps pytest      (then: run with carry [".gpu_deps"])
# The FedAvg/FLea table grid in one call is scripts/gpu_grid.sh.
# Results go to $OUT (default gpu_out/): machine.txt, tests_gpu.txt and two files (JSON, log) per other stage;
# a lent machine returns 8 files, so pick tests and at most three other stages per call.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
STAGES=${STAGES:-tests runs}
export PYTHONPATH="src:.:.gpu_deps${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())'; } > "$OUT/machine.txt" 2>&1
if [[ " $STAGES " == *" tests "* ]]; then
  timeout "${TESTS_S:-300}" python3 -m pytest -q -p no:cacheprovider -o addopts="--import-mode=importlib" tests/gpu \
      tests/unit/attacks/test_device_attacks.py tests/unit/test_device_flower.py -k cuda \
      > "$OUT/tests_gpu.txt" 2>&1
  echo "tests/gpu exit $?" >> "$OUT/tests_gpu.txt"
  tail -3 "$OUT/tests_gpu.txt"
fi
if [[ " $STAGES " == *" runs "* ]]; then
  timeout 420 python3 benchmarks/gpu.py --modes default --device cuda --out "$OUT/device_runs.json" > "$OUT/device_runs.log" 2>&1
  echo "device_runs exit $?" >> "$OUT/device_runs.log"
  tail -4 "$OUT/device_runs.log"
fi
if [[ " $STAGES " == *" syncs "* ]]; then
  timeout "${SYNCS_S:-120}" python3 benchmarks/host_syncs.py --rounds 3 --out "$OUT/gpu_syncs.json" > "$OUT/gpu_syncs.log" 2>&1
  echo "gpu_syncs exit $?" >> "$OUT/gpu_syncs.log"
  tail -3 "$OUT/gpu_syncs.log"
fi
if [[ " $STAGES " == *" floor "* ]]; then
  timeout "${FLOOR_S:-180}" python3 benchmarks/engine_vs_floor.py --device cuda --rounds 5 \
      --out "$OUT/floor.json" > "$OUT/floor.log" 2>&1
  echo "engine_vs_floor exit $?" >> "$OUT/floor.log"
  tail -3 "$OUT/floor.log"
fi
packed() {  # $1: the file name stem under $OUT
  timeout "${PACKED_S:-240}" python3 benchmarks/gpu.py --device cuda --modes packed \
      --workers "${PACKED_WORKERS:-16}" --rounds "${PACKED_ROUNDS:-20}" --out "$OUT/$1.json" > "$OUT/$1.log" 2>&1
  echo "gpu.py packed exit $?" >> "$OUT/$1.log"
  tail -3 "$OUT/$1.log"
}
if [[ " $STAGES " == *" packed "* ]]; then
  packed packed
fi
if [[ " $STAGES " == *" mps "* ]]; then
  if scripts/mps.sh start >> "$OUT/machine.txt" 2>&1; then
    packed packed_mps
    scripts/mps.sh stop >> "$OUT/machine.txt" 2>&1
  else
    echo "mps stage skipped: MPS did not start (machine.txt)"
  fi
fi
if [[ " $STAGES " == *" graphs "* ]]; then
  timeout "${GRAPHS_S:-300}" python3 benchmarks/gpu.py --device cuda --modes sequential,graphs,packed_graphs \
      --workers "${PACKED_WORKERS:-16}" --rounds "${GRAPHS_ROUNDS:-20}" --out "$OUT/graphs.json" > "$OUT/graphs.log" 2>&1
  echo "gpu.py graphs exit $?" >> "$OUT/graphs.log"
  tail -7 "$OUT/graphs.log"
  timeout "${SYNCS_S:-120}" python3 benchmarks/host_syncs.py --rounds 3 --set engine.cuda_graphs=true \
      --out "$OUT/gpu_syncs_graphs.json" > "$OUT/gpu_syncs_graphs.log" 2>&1
  echo "gpu_syncs graphs exit $?" >> "$OUT/gpu_syncs_graphs.log"
  tail -3 "$OUT/gpu_syncs_graphs.log"
fi
if [[ " $STAGES " == *" speed "* ]]; then
  timeout "${SPEED_S:-540}" python3 benchmarks/gpu.py --device cuda --workers "${WORKERS:-4}" \
      --rounds "${ROUNDS:-100}" --out "$OUT/gpu.json" \
      > "$OUT/gpu.log" 2>&1
  echo "gpu.py exit $?" >> "$OUT/gpu.log"
  tail -8 "$OUT/gpu.log"
fi
