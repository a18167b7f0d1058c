#!/usr/bin/env bash
# For the papers' tables a GPU window's one command is scripts/gpu_campaign.sh (studies/campaign.yaml, in order,
# within a budget, archived for `fedaug campaign import`); this script stays for issue #32's measurements.
# Issue #32's GPU measurements in ONE call of a lent GPU (15 minutes of device time a task, starts included,
# leave room for one command of about 9 minutes), in three stages that share BUDGET seconds (default 550):
#   1. the CUDA graph tests of tests/gpu (recorded steps against the eager loop in float64 for FedAvg and FLea,
#      one wait for the GPU per client, the host-read fallback, every registered method recorded, dropped
#      recordings' memory given back) and the batched-vs-sequential float64 test, at most TESTS_S seconds
#      (default 100; cut short with no failure counts as passed);
#   2. a probe: benchmarks/gpu.py --modes sequential,graphs,batched, PROBE_ROUNDS (default 3) rounds of FedAvg
#      and FLea on the default preset, median time per round without and with engine.cuda_graphs, and with
#      engine.batched_clients (PROBE_S, 110; PROBE_MODES adds others, e.g. graphs_unreleased: the memory
#      recordings reserve without their release);
#   3. scripts/gpu_grid.sh, FLea Table 1's FedAvg and FLea rows (36 runs, WORKERS packed, default 16), with
#      engine.cuda_graphs on when stage 1 passed and stage 2 measured graphs faster for both methods (GRAPHS
#      forces it: true or false), under NVIDIA MPS when scripts/mps.sh starts it, which it does only when a
#      CUDA process gets through it (MPS=0: never; without MPS the 16 workers' tiny kernels take turns on the
#      GPU), until BUDGET runs out (a grid cut short is archived and reported as far as it got, and resumes
#      with the same RUNS folder).
# Files (8, what a lent machine returns): machine.txt (the card, torch, the graphs decision),
# tests_graphs.txt, probe.json, probe.log, grid.log, report/report.md, report/report.csv, grid_runs.tgz.
#   OUT=$OUT scripts/gpu_session.sh                                           # on the GPU machine
#   python benchmarks/gpu_session_summary.py FILES_AT     # back here: the numbers against #32's targets
#   OUT=/tmp/s DEVICE=cpu MPS=0 BUDGET=150 PROBE_ROUNDS=2 WORKERS=2 SEEDS=0 scripts/gpu_session.sh  # dry run
# GRID_FIRST=1 runs the grid first (GRAPHS default true), leaving AFTER_S seconds (default 150) of BUDGET for the
# tests and then the probe, each cut to what is left: the grid is what matters most and always gets its time.
# GRID=0 stops after the probe, so the grid can have a command of its own on the same warm machine: then
# `OUT=$OUT GRAPHS=<machine.txt's decision> MPS=1 LIMIT=<s> scripts/gpu_grid.sh`.
# On an H100 (2026-11-27) this one command took 283 s, the grid's sweep 223 s (all 36 runs, at most 48.7 GiB):
#   OUT=$OUT GRID_FIRST=1 BUDGET=570 AFTER_S=60 TESTS_S=90 PROBE_ROUNDS=5 PROBE_MODES=graphs,graphs_unreleased \
#       MPS=1 scripts/gpu_session.sh                                               # timeout_s 600
# (a start of 40-120 s and one such command fit the 15 minutes a task has), and back here:
#   python benchmarks/gpu_session_summary.py FILES_AT \
#       --reference studies/flea_table1_har/h100/runs      # accuracy against the first H100 grid, paired by seed
# tests/smoke/test_gpu_scripts.py runs this script on the CPU (GRID=0, and GRID_FIRST=1 with a 2-round grid).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
BUDGET=${BUDGET:-550}
DEVICE=${DEVICE:-cuda}
start=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - start))); }
at_most() { echo $(($1 < $2 ? $1 : $2)); }  # the smaller of two numbers of seconds
export PYTHONPATH="src:.:.gpu_deps${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())'; } > "$OUT/machine.txt" 2>&1

run_tests() {  # $1: seconds at most
  timeout "$1" python3 -m pytest -q -p no:cacheprovider -o addopts="--import-mode=importlib" tests/gpu \
      -k "graphs or records or falls_back or memory or batched" > "$OUT/tests_graphs.txt" 2>&1
  tests_rc=$?
  echo "tests exit $tests_rc after $(($(date +%s) - start)) s" | tee -a "$OUT/tests_graphs.txt"
  # cut short by the timeout counts as passed when no test failed before it (pytest -q's progress lines)
  if ((tests_rc == 124)) && ! grep -E '^[.sxXFE]+( |$)' "$OUT/tests_graphs.txt" | grep -q '[FE]'; then tests_rc=0; fi
}

run_probe() {  # $1: seconds at most
  timeout "$1" python3 benchmarks/gpu.py --device "$DEVICE" --modes "${PROBE_MODES:-sequential,graphs,batched}" \
      --rounds "${PROBE_ROUNDS:-3}" --out "$OUT/probe.json" > "$OUT/probe.log" 2>&1
  echo "probe exit $? after $(($(date +%s) - start)) s" | tee -a "$OUT/probe.log"
}

run_grid() {  # $1: the sweep's seconds at most
  echo "grid: engine.cuda_graphs=$GRAPHS, MPS=${MPS:-1} (grid.log says whether it started), $1 s for the sweep" \
      | tee -a "$OUT/machine.txt"
  if [[ "${GRID:-1}" == 0 ]]; then
    echo "grid skipped (GRID=0)"
  elif (($1 > 30)); then
    OUT=$OUT GRAPHS=$GRAPHS MPS=${MPS:-1} LIMIT=$1 DEVICE=$DEVICE scripts/gpu_grid.sh
  else
    echo "no time left for the grid"
  fi
}

# the archive, the report and the tarball take about 20 s; starting MPS and checking it up to 30 s more
grid_overhead=$((${MPS:-1} == 1 ? 60 : 30))
if [[ "${GRID_FIRST:-0}" == 1 ]]; then
  # the grid first, with engine.cuda_graphs unless GRAPHS=false, leaving AFTER_S for the tests and the probe
  GRAPHS=${GRAPHS:-true}
  run_grid $(($(left) - grid_overhead - ${AFTER_S:-150}))
  if (($(left) > 20)); then run_tests "$(at_most "${TESTS_S:-100}" $(($(left) - 10)))"; fi
  if (($(left) > 20)); then run_probe "$(at_most "${PROBE_S:-110}" $(($(left) - 5)))"; fi
else
  run_tests "${TESTS_S:-100}"
  run_probe "${PROBE_S:-110}"
  if [[ -z "${GRAPHS:-}" ]]; then
    # graphs when the tests passed and every method's median round was faster with them
    GRAPHS=$(python3 - "$OUT/probe.json" "$tests_rc" <<'EOF'
import json, sys
try:
    methods = json.load(open(sys.argv[1]))["methods"]
    faster = [
        {r["mode"]: r["median_round_s"] for r in rows}.get("graphs", 1e9)
        < {r["mode"]: r["median_round_s"] for r in rows}.get("sequential", 0)
        for rows in methods.values()
    ]
    print(str(sys.argv[2] == "0" and bool(faster) and all(faster)).lower())
except (OSError, KeyError, ValueError, TypeError):
    print("false")
EOF
)
  fi
  run_grid $(($(left) - grid_overhead))
fi
echo "session done after $(($(date +%s) - start)) s" | tee -a "$OUT/machine.txt"
