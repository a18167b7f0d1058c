#!/usr/bin/env bash
# Runs the commands of a steps file (default: steps.txt beside this script; one per line, '#' lines skipped)
# one after another, from the repository root, and records each finished one in runs/privacy_steps.done (a
# failed one in runs/privacy_steps.failed) so that a restart skips it. The file is re-read after
# every step, so lines may be appended while it runs. Training runs resume by themselves (fedaug run).
# The steps run on a copy of src/ taken when the runner starts (runs/privacy_src), so that editing the source
# while the study runs does not change it half-way; restart the runner to pick up a newer source.
# Use (from the repository root): nohup bash studies/privacy/multiseed/run_steps.sh > runs/privacy_bg.log 2>&1 &
# UCI-HAR: nohup bash studies/privacy/multiseed/run_steps.sh studies/privacy_har/steps.txt > runs/har_bg.log 2>&1 &
# STEPS_TAG (default privacy) names the ledgers and the source copy, runs/${STEPS_TAG}_steps.done etc., so
# that another study's runner (studies/privacy_dp/run_steps.sh) keeps its own.
set -u
tag="${STEPS_TAG:-privacy}"
mkdir -p "runs/${tag}_src"
rm -rf "runs/${tag}_src/src" && cp -r src "runs/${tag}_src/src"
export PYTHONPATH="$PWD/runs/${tag}_src/src"
here=$(dirname "$0")
steps="${1:-$here/steps.txt}"
done_file="runs/${tag}_steps.done"
failed_file="runs/${tag}_steps.failed"
touch "$done_file" "$failed_file"
while true; do
    next=""
    while IFS= read -r line; do
        [[ -z "$line" || "$line" == \#* ]] && continue
        if ! grep -qxF -- "$line" "$done_file" && ! grep -qxF -- "$line" "$failed_file"; then
            next="$line"
            break
        fi
    done < "$steps"
    [[ -z "$next" ]] && break
    echo "=== $(date -u +%FT%TZ) start: $next"
    start=$(date +%s)
    if bash -c "$next"; then
        echo "$next" >> "$done_file"
        echo "=== $(date -u +%FT%TZ) done in $(( $(date +%s) - start )) s: $next"
    else
        echo "$next" >> "$failed_file"
        echo "=== $(date -u +%FT%TZ) FAILED after $(( $(date +%s) - start )) s: $next"
    fi
done
echo "=== $(date -u +%FT%TZ) all steps done"
