#!/usr/bin/env bash
# Build the local Kubernetes control plane from Go modules, pinned, cached
# outside the repo, keyed by version. Reuses what is already built.
#
#   build-control-plane.sh              build (or reuse) everything (gpuroster cluster build)
#   build-control-plane.sh --print-bin  print the bin directory (gpuroster cluster bin-dir)
#
# Binaries: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl, kwok, helm; prometheus (for the PromQL demand source; built without
# service-discovery plugins or web UI assets, the HTTP API is all the tests use);
# and, in crds/, the ServiceMonitor CRD from the prometheus-operator module (the
# chart's ServiceMonitor is validated against it). No Docker, no downloads but
# the Go module proxy.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
PROMETHEUS_OPERATOR_VERSION="${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}"
# Prometheus v3.X.Y is the Go module github.com/prometheus/prometheus v0.3XX.Y.
PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"

CACHE="${GPUROSTER_CACHE:-$HOME/.cache/gpuroster}"
KEY="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_helm-${HELM_VERSION}"
BIN="$CACHE/bin/$KEY"

if [[ "${1:-}" == "--print-bin" ]]; then echo "$BIN"; exit 0; fi

export GOMODCACHE="${GOMODCACHE_OVERRIDE:-$CACHE/go/mod}"
export GOCACHE="${GOCACHE_OVERRIDE:-$CACHE/go/build}"
export GOFLAGS="-buildvcs=false -mod=mod"
export CGO_ENABLED=0
export GOTOOLCHAIN=local
mkdir -p "$BIN" "$CACHE/src"

log() { printf '[build-control-plane] %s\n' "$*" >&2; }
have() { [[ -x "$BIN/$1" ]]; }
started=$(date +%s)

staging=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go
  cloud-provider cluster-bootstrap code-generator component-base component-helpers
  controller-manager cri-api cri-client cri-streaming csi-translation-lib
  dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator
  kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
  mount-utils pod-security-admission sample-apiserver sample-cli-plugin
  sample-controller streaming)

build_etcd() {
  have etcd && return 0
  local dir="$CACHE/src/etcd-$ETCD_VERSION"
  mkdir -p "$dir"
  cat > "$dir/go.mod" <<MOD
module gpuroster.local/etcd-build

go 1.25

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
MOD
  cat > "$dir/tools.go" <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
  log "etcd $ETCD_VERSION"
  (cd "$dir" && go mod tidy >/dev/null 2>&1 || go mod download all)
  (cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3)
}

build_k8s() {
  local missing=0
  for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do have "$b" || missing=1; done
  [[ $missing == 0 ]] && return 0
  local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  local staging_version="v0.${K8S_VERSION#v1.}"
  local dir="$CACHE/src/k8s-$K8S_VERSION"
  mkdir -p "$dir"
  {
    printf 'module gpuroster.local/k8s-build\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$K8S_VERSION"
    for m in "${staging[@]}"; do printf '\tk8s.io/%s => k8s.io/%s %s\n' "$m" "$m" "$staging_version"; done
    printf ')\n'
  } > "$dir/go.mod"
  cat > "$dir/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  log "kubernetes $K8S_VERSION (staging $staging_version): module graph"
  (cd "$dir" && go mod tidy)
  local vpkg=k8s.io/component-base/version
  local cpkg=k8s.io/client-go/pkg/version
  local ld="-s -w"
  for p in $vpkg $cpkg; do
    ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  log "kubernetes $K8S_VERSION: compiling (many minutes cold on 2 cores)"
  (cd "$dir" && go build -trimpath -ldflags "$ld" -o "$BIN/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
}

build_kwok() {
  have kwok && return 0
  log "kwok $KWOK_VERSION"
  GOBIN="$BIN" go install -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
}

build_helm() {
  have helm && return 0
  log "helm $HELM_VERSION"
  GOBIN="$BIN" go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
}

build_prometheus() {
  local out="$BIN/prometheus-$PROMETHEUS_VERSION"
  [[ -x "$out" ]] && return 0
  log "prometheus $PROMETHEUS_VERSION"
  local tmp="$CACHE/src/prometheus-$PROMETHEUS_VERSION"
  mkdir -p "$tmp"
  GOBIN="$tmp" go install -trimpath -tags "remove_all_sd,netgo" -ldflags "-s -w" \
    "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_VERSION"
  mv "$tmp/prometheus" "$out"
}

fetch_crds() {
  local out="$BIN/crds/monitoring.coreos.com_servicemonitors-$PROMETHEUS_OPERATOR_VERSION.yaml"
  [[ -f "$out" ]] && return 0
  log "ServiceMonitor CRD from prometheus-operator $PROMETHEUS_OPERATOR_VERSION"
  local dir
  dir=$(cd "$CACHE/src" && go mod download -json \
    "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  mkdir -p "$BIN/crds"
  cp "$dir/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml" "$out.tmp"
  chmod u+w "$out.tmp" && mv "$out.tmp" "$out"
}

build_etcd
build_kwok
build_helm
build_k8s
build_prometheus
fetch_crds

elapsed=$(( $(date +%s) - started ))
log "all binaries in $BIN (${elapsed}s this run)"
echo "$BIN"
