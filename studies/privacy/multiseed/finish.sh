#!/usr/bin/env bash
# Archives the finished runs of the multi-seed privacy study and regenerates its tables and frontier from the
# archived runs and the attack outputs (run from the repository root, with fedaug installed; seconds).
set -eu
S=studies/privacy/multiseed
. scripts/archive_finished.sh
for name in runs/privacy_fmnist runs/privacy_fmnist_decor* runs/privacy_fmnist_dcorsq; do
    archive_finished "$name" "$S/runs/$(basename "$name")"
done
fedaug attack summary "$S/attacks" --out "$S/summary"
python scripts/seed0_figures.py "$S/attacks"   # seed 0 keeps its figures, later seeds their numbers
A=$S/runs/privacy_fmnist/fashion_mnist-quantity3-K100
settings=("lambda2 0 (undefended)=$S/runs/privacy_fmnist_decor0/fashion_mnist-quantity3-K100/flea")
# every setting trains under flea's default schedule, lambda2(t) = max(lambda2 - 0.1 (t - 1), min(lambda2, 1)):
# a configured lambda2 of 1 or below stays constant, 2 reaches 1 in round 11, 6 is 3.1 in round 30
declare -A l2_label=([0.5]="lambda2 0.5 (constant)" [1]="lambda2 1 (constant)" [2]="lambda2 2 -> 1"
    [6]="lambda2 6 -> 3.1 at round 30")
for l2 in 0.5 1 2 6; do
    d=$S/runs/privacy_fmnist_decor$l2/fashion_mnist-quantity3-K100/flea
    [ -d "$d" ] && settings+=("${l2_label[$l2]}=$d")
done
settings+=("flea default (lambda2 3 -> 1)=$A/flea")
for m in flea_eq6 flea_official; do [ -d "$A/$m" ] && settings+=("$m=$A/$m"); done
d=$S/runs/privacy_fmnist_dcorsq/fashion_mnist-quantity3-K100/flea
[ -d "$d" ] && settings+=("dcor_squared, lambda2 3 -> 1=$d")
reference=()
[ -d "$A/fedavg" ] && reference=(--reference "FedAvg=$A/fedavg")
for decoder in deep conv4; do
    fedaug attack frontier "${settings[@]}" --attacks "$S/attacks" "${reference[@]}" --round 30 \
        --decoder "$decoder" --out "$S/frontier_$decoder"
done
