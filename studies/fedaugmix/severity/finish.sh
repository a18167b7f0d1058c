#!/usr/bin/env bash
# Archives the finished runs of the severity study and draws its frontier from the archived runs and the
# Inverting Gradients outputs (run from the repository root, with fedaug installed; seconds). Only FedAvg's
# runs are taken from runs/fedaugmix_mnist (other work may have left Fed-AugMix runs of the default severity
# there); each severity's Fed-AugMix runs come from runs/fedaugmix_sev<S>.
set -eu
S=studies/fedaugmix/severity
P=mnist-dirichlet0.5-K100
[ -d runs/fedaugmix_mnist/$P/fedavg ] && fedaug archive runs/fedaugmix_mnist/$P/fedavg --out "$S/runs/fedaugmix_mnist/$P/fedavg"
for s in 1 3 6 10; do
    [ -d "runs/fedaugmix_sev$s" ] && fedaug archive "runs/fedaugmix_sev$s" --out "$S/runs/fedaugmix_sev$s"
done
for metric in ssim mse; do
    fedaug attack invert-frontier "$S/runs" --invert "$S"/invert/seed* --metric "$metric" --out "$S/frontier_$metric"
done
