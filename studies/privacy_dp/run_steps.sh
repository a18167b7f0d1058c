#!/usr/bin/env bash
# Runs the DP frontier study's steps (default: steps.txt beside this script; steps_tiny.txt for the chain
# check) with the privacy studies' resumable runner (studies/privacy/multiseed/run_steps.sh), keeping its own
# ledgers, runs/privacy_dp_steps.done / .failed (the tiny chain: runs/privacy_dp_tiny_steps.*), so a restart
# skips what finished. From the repository root:
#   nohup bash studies/privacy_dp/run_steps.sh > runs/privacy_dp_bg.log 2>&1 &
#   bash studies/privacy_dp/run_steps.sh studies/privacy_dp/steps_tiny.txt    # the chain check, minutes
# On a machine that starts fresh (no ledger, no runs/), the steps whose results finish.sh archived in
# studies/privacy_dp are marked done first (make_steps.py --archived), so only the rest run.
set -eu
steps="${1:-$(dirname "$0")/steps.txt}"
tag=privacy_dp
case "$steps" in *tiny*) tag=privacy_dp_tiny ;; esac
if [ "$tag" = privacy_dp ]; then
    mkdir -p runs
    python "$(dirname "$0")/make_steps.py" --archived "$steps" >> "runs/${tag}_steps.done"
fi
STEPS_TAG=$tag exec bash studies/privacy/multiseed/run_steps.sh "$steps"
