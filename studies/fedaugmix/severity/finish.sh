#!/usr/bin/env bash
# Archives the finished runs of the severity study and draws its frontier from the archived runs and the
# Inverting Gradients outputs (run from the repository root, with fedaug installed; seconds). Only FedAvg's
# runs are taken from runs/fedaugmix_mnist (other work may have left Fed-AugMix runs of the default severity
# there); each severity's Fed-AugMix runs come from runs/fedaugmix_sev<S>.
set -eu
S=studies/fedaugmix/severity
P=mnist-dirichlet0.5-K100
. scripts/archive_finished.sh
archive_finished runs/fedaugmix_mnist/$P/fedavg "$S/runs/fedaugmix_mnist/$P/fedavg"
for s in 1 3 6 10; do
    archive_finished "runs/fedaugmix_sev$s" "$S/runs/fedaugmix_sev$s"
done
# an attack still writing its seed's results.jsonl is left out: where the steps' runner keeps its record
# (runs/privacy_steps.done), only the seeds whose attack step is in it count
invert=()
for d in "$S"/invert/seed*; do
    if [ ! -f runs/privacy_steps.done ] || grep -q -- "--out $d\$" runs/privacy_steps.done; then invert+=("$d"); fi
done
python scripts/seed0_figures.py "$S/invert"   # seed 0 keeps its figures, later seeds their numbers
for metric in ssim mse; do
    fedaug attack invert-frontier "$S/runs" --invert "${invert[@]}" --metric "$metric" --out "$S/frontier_$metric"
done
