#!/usr/bin/env bash
# Create the gpuroster kind cluster (needs Docker or Podman, kind, kubectl):
# the default kube-scheduler configured with deploy/scheduler/scheduler-config.yaml
# (extender at http://127.0.0.1:$GPUROSTER_NODE_PORT, a NodePort on the
# control-plane node), workers with fake GPUs.
#
#   deploy/kind/create-cluster.sh            cluster "gpuroster", 8 GPUs per worker
#   KIND_NODE_IMAGE=kindest/node:v1.36.x deploy/kind/create-cluster.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
name="${KIND_CLUSTER_NAME:-gpuroster}"
node_port="${GPUROSTER_NODE_PORT:-30888}"
gpus="${GPUS_PER_NODE:-8}"

for tool in kind kubectl; do
  command -v "$tool" >/dev/null || { echo "create-cluster.sh: $tool not found" >&2; exit 1; }
done

# The node mounts a directory it can keep: render it under ~/.cache.
cp_dir="${XDG_CACHE_HOME:-$HOME/.cache}/gpuroster/kind/$name/control-plane"
rm -rf "$cp_dir" && mkdir -p "$cp_dir/patches"
cp "$here/control-plane/patches/"*.yaml "$cp_dir/patches/"
sed -e "s#urlPrefix: http://127.0.0.1:[0-9]*#urlPrefix: http://127.0.0.1:$node_port#" \
  -e "s#leaderElect: false#leaderElect: true#" \
  "$repo/deploy/scheduler/scheduler-config.yaml" > "$cp_dir/scheduler-config.yaml"

config="$(mktemp)"
trap 'rm -f "$config"' EXIT
sed -e "s#__GPUROSTER_CONTROL_PLANE_DIR__#$cp_dir#" -e "s#^name: gpuroster#name: $name#" \
  "$here/kind-config.yaml" > "$config"

kind create cluster --config "$config" ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"} --wait 120s
kubectl config use-context "kind-$name"
"$here/fake-gpus.sh" "$gpus"
echo "kind cluster $name is up; kube-scheduler calls the extender at http://127.0.0.1:$node_port"
