#!/usr/bin/env bash
# NVIDIA MPS (Multi-Process Service) for packed runs: `scripts/mps.sh start` before `fedaug sweep --workers N
# --device cuda`, `scripts/mps.sh stop` after. Without MPS the workers' CUDA contexts take turns on the GPU in
# time slices, so every host-device synchronisation of a run waits for its next turn; under MPS their kernels
# share the GPU at once. It starts a control daemon of this user (nothing about the GPU's own settings changes)
# and stops it again; runs started while it is up use it, others are not affected. Exit 1 (and runs go on
# without MPS) where nvidia-cuda-mps-control is missing, the daemon does not start, or a CUDA process (PYTHON,
# default python3, with torch) does not get through it within MPS_CHECK_S (default 30) seconds; then it is
# stopped again and its pipes removed.
#   scripts/mps.sh start | stop | status
set -uo pipefail
export CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-/tmp/nvidia-mps-log}  # the default, /var/log, needs root
pipe=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}
case "${1:-}" in
  start)
    if ! command -v nvidia-cuda-mps-control > /dev/null; then
      echo "mps: nvidia-cuda-mps-control not found: runs will take turns on the GPU" >&2
      exit 1
    fi
    mkdir -p "$CUDA_MPS_LOG_DIRECTORY" "$pipe"
    if ! nvidia-cuda-mps-control -d; then
      echo "mps: the daemon did not start (see $CUDA_MPS_LOG_DIRECTORY/control.log)" >&2
      exit 1
    fi
    # a CUDA process must get through the server, else every run would fail: stopped, pipes removed
    if ! timeout "${MPS_CHECK_S:-30}" "${PYTHON:-python3}" -c "import torch; torch.ones(8, device='cuda').sum().item()" > /dev/null 2>&1; then
      echo quit | nvidia-cuda-mps-control > /dev/null 2>&1
      rm -rf "$pipe"
      echo "mps: no CUDA process got through the server (see $CUDA_MPS_LOG_DIRECTORY): stopped" >&2
      exit 1
    fi
    echo "mps: started (pipes in $pipe, logs in $CUDA_MPS_LOG_DIRECTORY)"
    ;;
  stop)
    echo quit | nvidia-cuda-mps-control > /dev/null 2>&1 && echo "mps: stopped" || echo "mps: was not running"
    ;;
  status)
    if [[ -S "$pipe/control" ]] || [[ -p "$pipe/control" ]]; then echo "mps: running"; else echo "mps: not running"; fi
    ;;
  *)
    echo "usage: scripts/mps.sh start|stop|status, got '${1:-}'" >&2
    exit 2
    ;;
esac
