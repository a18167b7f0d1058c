#!/usr/bin/env bash
# Archives the finished runs of the DP frontier study and draws one frontier per dataset and decoder (last-10
# accuracy against reconstruction MSE and context samples, mean and std over seeds) with fedaug attack
# frontier: FLea at split layers 1 and 2 and FedMix (no split layer: one point per epsilon), each at epsilon
# inf, 8, 4, 2, 1; the undefended features of the earlier studies (lambda2 0 at the default split layer, from
# their archived runs and attack outputs) as one more point, and FedAvg's accuracy as the reference line.
# From the repository root (seconds):  bash studies/privacy_dp/finish.sh
#   bash studies/privacy_dp/finish.sh --tiny    # the chain check: reads and writes runs/privacy_dp_tiny_* only
set -eu
S=studies/privacy_dp
tiny=""
[ "${1:-}" = "--tiny" ] && tiny=_tiny
if [ -z "$tiny" ]; then
    . scripts/archive_finished.sh
    for name in runs/privacy_dp_fmnist_* runs/privacy_dp_har_*; do
        [ -d "$name" ] && archive_finished "$name" "$S/runs/$(basename "$name")"
    done
    R=$S/runs A=$S/attacks O=$S
else
    R=runs A=runs/privacy_dp_tiny_attacks O=runs/privacy_dp_tiny
fi
[ -d "$A" ] && fedaug attack summary "$A" --out "$O/summary"
frontier() {  # KEY TAIL UNDEFENDED_DIR UNDEFENDED_ATTACKS FEDAVG_DIR
    local key=$1 tail=$2 settings=()
    for eps in inf 8 4 2 1; do
        for layer in 1 2; do
            d=$R/privacy_dp${tiny}_${key}_l${layer}_eps$eps/$tail/flea
            [ -d "$d" ] && settings+=("flea l$layer eps $eps=$d")
        done
        d=$R/privacy_dp${tiny}_${key}_eps$eps/$tail/fedmix
        [ -d "$d" ] && settings+=("fedmix eps $eps=$d")
    done
    [ ${#settings[@]} -eq 0 ] && { echo "no $key runs yet"; return 0; }
    settings+=("undefended (lambda2 0, default layer, no DP)=$3")
    for decoder in deep conv4; do
        fedaug attack frontier "${settings[@]}" --attacks "$A/$key" "$4" --reference "FedAvg=$5" \
            --decoder "$decoder" --out "$O/frontier_${key}_$decoder"
    done
}
frontier fmnist fashion_mnist-quantity3-K100 \
    studies/privacy/multiseed/runs/privacy_fmnist_decor0/fashion_mnist-quantity3-K100/flea \
    studies/privacy/multiseed/attacks \
    studies/privacy/multiseed/runs/privacy_fmnist/fashion_mnist-quantity3-K100/fedavg
frontier har uci_har-quantity2-K75 \
    studies/privacy_har/runs/privacy_har_decor0/uci_har-quantity2-K75/flea \
    studies/privacy_har/attacks \
    studies/flea_objective_har/runs/uci_har-quantity2-K75/fedavg
