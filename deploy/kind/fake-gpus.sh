#!/usr/bin/env bash
# Give nodes fake nvidia.com/gpu capacity, as the Kubernetes docs describe for
# extended resources ("Advertise Extended Resources for a Node"): a JSON patch
# on the node's status. Also labels gpuroster.io/topology-order so the planner
# sees the nodes in a fixed order.
#
#   deploy/kind/fake-gpus.sh [GPUS_PER_NODE] [NODE...]
#
# Default: 8 GPUs on every node without the control-plane role. Uses the
# current kubectl context (or $KUBECONFIG).
set -euo pipefail

gpus="${1:-8}"
shift || true
if [[ $# -gt 0 ]]; then
  nodes=("$@")
else
  mapfile -t nodes < <(kubectl get nodes -l '!node-role.kubernetes.io/control-plane' \
    -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | sort)
fi
[[ ${#nodes[@]} -gt 0 ]] || { echo "fake-gpus.sh: no nodes to patch" >&2; exit 1; }

i=0
for node in "${nodes[@]}"; do
  kubectl patch node "$node" --subresource=status --type=json \
    -p "[{\"op\": \"add\", \"path\": \"/status/capacity/nvidia.com~1gpu\", \"value\": \"$gpus\"}]"
  kubectl label node "$node" --overwrite "gpuroster.io/topology-order=$i"
  i=$((i + 1))
done

# The kubelet copies capacity into allocatable on its next status update.
for node in "${nodes[@]}"; do
  for _ in $(seq 1 60); do
    got=$(kubectl get node "$node" -o jsonpath='{.status.allocatable.nvidia\.com/gpu}')
    [[ "$got" == "$gpus" ]] && break
    sleep 1
  done
  echo "$node: nvidia.com/gpu allocatable=${got:-none}"
done
