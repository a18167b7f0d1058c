#!/usr/bin/env bash
# Issue #52's throughput targets in ONE call of a lent GPU, within TIME seconds (first argument, else $TIME,
# default 480; keep it under 9 minutes), each stage cut to what is left:
#   1. tests/gpu/test_throughput.py: padded batched clients replayed as ONE CUDA graph against the sequential
#      loop in float64, FLea's fused head passes against separate ones on CUDA (at most 90 s);
#   2. the default preset, one run alone in a fresh process each, start-up included: FedAvg (target <= 5 s)
#      and FLea (target <= 15 s), ROUNDS rounds (default 100), each twice: sequential clients with CUDA graphs
#      (today's CUDA default, engine.batched_clients=false) and padded batched clients with graphs
#      (engine.batched_clients=padded, each round's clients one recorded step) -> runs.txt (wall seconds,
#      exit code, per method and mode, and the run's start-up line: its seconds before round 1 phase by
#      phase, fedaug.runtime.startup; BATCHED_MODES, default "false padded");
#   3. benchmarks/flea_head_passes.py on the GPU: a FLea client step with fused vs separate head passes, eager
#      and with the steps recorded as CUDA graphs (--graphs); both go into ONE file, flea_head_passes.json: {"eager": ..., "graphs": ...} (null for a stage cut);
#   4. benchmarks/many_run_eval.py (at most 75 s; EVAL_ARGS, default "--repeats 2"): R = 1, 4, 16 models'
#      evaluation in one stacked vmapped pass vs one after the other, HARNet and MobileNetV2-CIFAR, checked
#      equal first (float64 logits, float32 argmax agreement);
#   5. benchmarks/gpu.py --preset PRESETS (default the three CIFAR-10 conv nets): client steps per mode (eager,
#      channels_last, bf16, graphs, batched, batched_graphs, packed) against the batch-1024 bf16
#      channels-last floor, STEPS timed steps each (default 20).
# Files under $OUT (8): machine.txt, tests_throughput.txt, runs.txt, flea_head_passes.json,
# many_run_eval.json, conv.json, conv.log, stages.txt (each stage's exit code and seconds).
#   OUT=$OUT scripts/gpu_throughput.sh 480                                     # on the GPU machine
#   OUT=/tmp/t DEVICE=cpu RUN_CONFIG=smoke ROUNDS=1 PRESETS=smoke_bn_cnn STEPS=1 \
#       CONV_ARGS="--batch 2 --clients 2 --floor-batch 4 --packed 2" HEAD_ARGS="--samples 32 --repeats 1" \
#       EVAL_ARGS="--model harnet --runs 1 2 --samples 8 --repeats 1" \
#       scripts/gpu_throughput.sh 300                                             # dry run on a CPU
# (RUN_CONFIG, default "default": the preset of stage 2; "smoke" is synthetic data and a tiny MLP.)
# scripts/gpu_session.sh (issue #51's campaign) may call it as a stage of its own; nothing here depends on it.
# tests/smoke/test_gpu_benchmark.py runs this script on the CPU with tiny settings (marked slow: -m slow).
set -uo pipefail
cd "$(dirname "$0")/.."
TIME=${1:-${TIME:-480}}
OUT=${OUT:-gpu_out}
DEVICE=${DEVICE:-cuda}
ROUNDS=${ROUNDS:-100}
RUN_CONFIG=${RUN_CONFIG:-default}
PRESETS=${PRESETS:-cifar10_mobilenet,cifar10_resnet18,cifar10_resnet50}
STEPS=${STEPS:-20}
mkdir -p "$OUT"
start=$(date +%s)
left() { echo $((TIME - ($(date +%s) - start))); }
at_most() { local v=$(($1 < $2 ? $1 : $2)); echo $((v < 1 ? 1 : v)); }  # never 0: `timeout 0` never ends
stage() {  # $1: name, $2: its exit code; appends to stages.txt
  echo "$1 exit $2 at $(($(date +%s) - start)) s" | tee -a "$OUT/stages.txt"
}
export PYTHONPATH="src:.:.gpu_deps${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
: > "$OUT/stages.txt"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())'; } > "$OUT/machine.txt" 2>&1

timeout "$(at_most 90 "$(left)")" python3 -m pytest -q -p no:cacheprovider -o addopts="--import-mode=importlib" \
    tests/gpu/test_throughput.py > "$OUT/tests_throughput.txt" 2>&1
stage tests $?

runs=$(mktemp -d)
: > "$OUT/runs.txt"
for method in fedavg flea; do
  for batched in ${BATCHED_MODES:-false padded}; do
    t0=$(date +%s.%N)
    timeout "$(at_most 120 "$(left)")" python3 -m fedaug run "$RUN_CONFIG" --set "method=$method" --set 'compare=[]' \
        --set "train.rounds=$ROUNDS" --set engine.progress=false --set "engine.batched_clients=$batched" \
        --device "$DEVICE" --out-dir "$runs/$batched" --fresh > "$runs/$method-$batched.log" 2>&1
    rc=$?
    echo "$method batched_clients=$batched rounds $ROUNDS wall_s $(echo "$(date +%s.%N) - $t0" | bc) exit $rc" \
        >> "$OUT/runs.txt"
    grep -m1 "start-up" "$runs/$method-$batched.log" >> "$OUT/runs.txt"  # the cold start, phase by phase
    tail -3 "$runs/$method-$batched.log" >> "$OUT/runs.txt"
    stage "run_${method}_$batched" $rc
  done
done
rm -rf "$runs"

heads=$(mktemp -d)
timeout "$(at_most 90 "$(left)")" python3 benchmarks/flea_head_passes.py --device "$DEVICE" ${HEAD_ARGS:-} \
    --out "$heads/eager.json" > /dev/null 2>> "$OUT/stages.txt"
stage flea_head_passes $?
timeout "$(at_most 90 "$(left)")" python3 benchmarks/flea_head_passes.py --device "$DEVICE" --graphs ${HEAD_ARGS:-} \
    --out "$heads/graphs.json" > /dev/null 2>> "$OUT/stages.txt"
stage flea_head_passes_graphs $?
python3 -c 'import json, os, sys
read = lambda p: json.load(open(p)) if os.path.exists(p) else None
json.dump({"eager": read(sys.argv[1]), "graphs": read(sys.argv[2])}, open(sys.argv[3], "w"), indent=1)' \
    "$heads/eager.json" "$heads/graphs.json" "$OUT/flea_head_passes.json"
rm -rf "$heads"

timeout "$(at_most 75 "$(left)")" python3 benchmarks/many_run_eval.py --device "$DEVICE" ${EVAL_ARGS:---repeats 2} \
    --out "$OUT/many_run_eval.json" > /dev/null 2>> "$OUT/stages.txt"
stage many_run_eval $?

timeout "$(at_most "$TIME" "$(left)")" python3 benchmarks/gpu.py --device "$DEVICE" --preset "$PRESETS" --steps "$STEPS" \
    ${CONV_ARGS:-} --out "$OUT/conv.json" > "$OUT/conv.log" 2>&1
stage conv $?
