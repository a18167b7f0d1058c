#!/usr/bin/env bash
# Archives the UCI-HAR privacy runs of runs/ (those finished so far) and regenerates the attack summary and the
# frontier of both decoders at round 100 from the archived runs and the attack outputs under attacks/; FedAvg's
# accuracy (the same setting, studies/flea_objective_har) is the reference line. From the repository root:
#   bash studies/privacy_har/finish.sh
set -eu
S=studies/privacy_har
. scripts/archive_finished.sh
for name in privacy_har privacy_har_decor0; do
    archive_finished "runs/$name" "$S/runs/$name"
done
fedaug attack summary "$S/attacks" --out "$S/summary"
python scripts/seed0_figures.py "$S/attacks"   # seed 0 keeps its figures, later seeds their numbers
for decoder in deep conv4; do
    fedaug attack frontier \
        "lambda2 0 (undefended)=$S/runs/privacy_har_decor0/uci_har-quantity2-K75/flea" \
        "flea default (lambda2 3 -> 1)=$S/runs/privacy_har/uci_har-quantity2-K75/flea" \
        --attacks "$S/attacks" --reference "FedAvg=studies/flea_objective_har/runs/uci_har-quantity2-K75/fedavg" \
        --round 100 --decoder "$decoder" --out "$S/frontier_$decoder"
done
