#!/usr/bin/env bash
# Flower deployment over TLS with SuperNode authentication on loopback: a SuperLink and 3 SuperNodes run
# FLea for 3 rounds on UCI-HAR (the copy shipped with fedaug), a 4th node with a key the SuperLink does not
# know is refused, then everything is shut down.
#
#   bash scripts/flower_tls_demo.sh            # needs: pip install -e '.[flower]'
#   KEEP=1 bash scripts/flower_tls_demo.sh     # keep the work folder (certificates, logs, run dir)
#   ROUNDS=2 bash scripts/flower_tls_demo.sh   # fewer rounds (default 3; the test suite runs 2)
#
# Steps: (1) a CA, a server certificate for 127.0.0.1/localhost and 3 SuperNode key pairs (fedaug flower
# certs); (2) 3 SuperNodes, one per client, that trust the CA and hold their key (fedaug flower client ...
# --root-certificates ca.crt --node-key nodes/node-<i>.key); (3) a SuperLink with the server certificate that
# registers the 3 public keys, runs the experiment and stops (fedaug flower serve --certs), and an impostor
# claiming client 0 with an unregistered key; (4) a check of the run's metrics and of the impostor's refusal.
# Free ports are picked at start; every process started here is stopped on exit,
# also on failure or Ctrl-C (trap), and a final sweep ends any process still carrying this run's FLWR_HOME.
set -euo pipefail
ROUNDS="${ROUNDS:-3}"
case "$ROUNDS" in ''|*[!0-9]*|0) echo "ROUNDS must be a positive whole number, got '$ROUNDS'" >&2; exit 2 ;; esac

WORK="$(mktemp -d "${TMPDIR:-/tmp}/fedaug-tls-demo.XXXXXX")"
export FLWR_HOME="$WORK/flwr-home"   # the SuperNodes' app installs and config; also marks our processes
PIDS=()

cleanup() {
    local code=$?
    trap - EXIT INT TERM
    for pid in "${PIDS[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
    for _ in $(seq 1 30); do
        local alive=0
        for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 0.5
    done
    for pid in "${PIDS[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
    # Flower's helpers (flower-superexec, flwr-clientapp) carry FLWR_HOME=$WORK/...: end any left behind.
    for environ in /proc/[0-9]*/environ; do
        pid="${environ#/proc/}"; pid="${pid%/environ}"
        [ "$pid" = "$$" ] && continue
        if { tr '\0' '\n' < "$environ"; } 2>/dev/null | grep -q "^FLWR_HOME=$WORK"; then
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
    exit "$code"
}
trap cleanup EXIT INT TERM

free_port() { python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PORT="$(free_port)"
echo "== work folder $WORK, SuperLink on 127.0.0.1:$PORT (TLS)"

echo "== 1. certificates and SuperNode keys"
fedaug flower certs "$WORK/certs" --host 127.0.0.1 --host localhost --nodes 3
fedaug flower keys "$WORK/impostor" --nodes 1   # a key pair the SuperLink never sees

echo "== 2. three SuperNodes (clients 0, 1, 2); they retry until the SuperLink is up and knows their key"
for i in 0 1 2; do
    setsid fedaug flower client --superlink "127.0.0.1:$PORT" --partition-id "$i" \
        --root-certificates "$WORK/certs/ca.crt" --node-key "$WORK/certs/nodes/node-$i.key" \
        --runtime-port "$(free_port)" > "$WORK/node$i.log" 2>&1 &
    PIDS+=($!)
done

echo "== 3. SuperLink + FLea, $ROUNDS rounds, UCI-HAR, 3 clients (all per round), 1 local epoch"
setsid fedaug flower serve --certs "$WORK/certs" --address "127.0.0.1:$PORT" --work-dir "$WORK/serve" \
    --method flea --out-dir "$WORK/runs" --fresh --node-timeout 300 \
    --set partition.num_clients=3 --set train.clients_per_round=3 --set "train.rounds=$ROUNDS" \
    --set train.local_epochs=1 --set engine.num_threads=1 --set engine.progress=false &
SERVE=$!
PIDS+=("$SERVE")
echo "   and an impostor claiming client 0 with an unregistered key"
setsid fedaug flower client --superlink "127.0.0.1:$PORT" --partition-id 0 \
    --root-certificates "$WORK/certs/ca.crt" --node-key "$WORK/impostor/nodes/node-0.key" \
    --register-timeout 30 --runtime-port "$(free_port)" > "$WORK/impostor.log" 2>&1 &
IMPOSTOR=$!
PIDS+=("$IMPOSTOR")
wait "$SERVE"
IMPOSTOR_CODE=0
wait "$IMPOSTOR" || IMPOSTOR_CODE=$?
if [ "$IMPOSTOR_CODE" = 0 ] || ! grep -q "refused this node's key" "$WORK/impostor.log"; then
    echo "the impostor was not refused (exit $IMPOSTOR_CODE):"; tail -20 "$WORK/impostor.log"; exit 1
fi
echo "impostor refused: $(grep -o "refused this node's key.*" "$WORK/impostor.log" | tail -1 | cut -c1-80)"

echo "== 4. check"
python - "$WORK/runs" "$ROUNDS" <<'EOF'
import json, math, sys
from pathlib import Path
runs = sorted(Path(sys.argv[1]).glob("default-flower/**/flea/seed0/metrics.jsonl"))  # default-flower/train.rounds=N,.../<setting>/
assert len(runs) == 1, f"expected one FLea run dir, found {runs}"
rounds = [json.loads(line) for line in runs[0].read_text().splitlines()]
assert [r["round"] for r in rounds] == list(range(1, int(sys.argv[2]) + 1)), rounds
for r in rounds:
    assert math.isfinite(r["train/loss"]) and 0.0 <= r["test/acc"] <= 1.0, r
    assert r["clients"] == [0, 1, 2] and r["flea/buffer_size"] > 0, r
print("FLea over TLS:", ", ".join(f"round {r['round']} acc {r['test/acc']:.4f}" for r in rounds))
EOF
echo "== done"
