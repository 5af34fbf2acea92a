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
# kueue (a replay peer); and, in crds/, the ServiceMonitor CRD from the
# prometheus-operator module (the chart's ServiceMonitor is validated against it)
# and Kueue's CRDs from its module. No Docker, no downloads but
# the Go module proxy.
#
# Each binary gets the build metadata its official release sets where it changes
# behaviour or what `--version` says: Kubernetes' version variables (as
# hack/lib/version.sh sets them), helm's version, tree state and the Kubernetes
# version it assumes without a cluster (derived from its client-go, as helm's
# Makefile does; without it `helm template` assumes v1.20), kwok's version. The
# module proxy carries no commit ids, so gitCommit stays unset.
#
# Binaries are reused by name; $BIN/.flags/<name> records the flags each was built
# with, so a change of flags rebuilds that binary alone (a relink, mostly: the Go
# build cache keeps the compiled packages). A binary built before these stamps is
# reused when its flags are the ones this script used then.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
PROMETHEUS_OPERATOR_VERSION="${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}"
# Prometheus v3.X.Y is the Go module github.com/prometheus/prometheus v0.3XX.Y.
PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"
# Kueue, a replay peer (`gpuroster bench --policies kueue`): v0.17.0 is the one 0.17
# release the module proxy serves.
KUEUE_VERSION="${KUEUE_VERSION:-v0.17.0}"
# kube-state-metrics, for `gpuroster whatif`'s e2e test (e2e/test_whatif.py). Not built
# by default: the module proxy answers 403 for k8s.io/kube-state-metrics/v2 (every
# version and the version list; 2026-12-04), so the test scrapes e2e/ksm_standin.py.
# The day it serves it, pin the version here: the test then starts
# bin/kube-state-metrics-<version> with the flags docs/try-it-first.md gives.
KSM_VERSION="${KSM_VERSION:-}"

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
# fresh NAME FLAGS [LEGACY]: NAME is built, with FLAGS. LEGACY: the flags this script
# used before it kept stamps; a binary without a stamp was built with those.
fresh() {
  local stamp="$BIN/.flags/$1"
  have "$1" || return 1
  if [[ ! -f "$stamp" ]]; then
    [[ "$2" == "${3-}" ]] || return 1
    stamp "$1" "$2"
  fi
  [[ "$(cat "$stamp")" == "$2" ]]
}
stamp() { mkdir -p "$BIN/.flags" && printf '%s\n' "$2" > "$BIN/.flags/$1"; }
started=$(date +%s)

staging=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go
  cloud-provider cluster-bootstrap code-generator component-base component-helpers
  controller-manager cri-api cri-client cri-streaming csi-translation-lib
  dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator
  kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
  mount-utils pod-security-admission sample-apiserver sample-cli-plugin
  sample-controller streaming)

build_etcd() {
  local ld="-s -w"
  fresh etcd "$ld" "$ld" && return 0
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
  (cd "$dir" && go build -trimpath -ldflags "$ld" -o "$BIN/etcd" go.etcd.io/etcd/server/v3)
  stamp etcd "$ld"
}

build_k8s() {
  local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  local vpkg=k8s.io/component-base/version
  local cpkg=k8s.io/client-go/pkg/version
  local ld="-s -w"
  for p in $vpkg $cpkg; do
    ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  local missing=0 b
  for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    fresh "$b" "$ld" "$ld" || missing=1
  done
  [[ $missing == 0 ]] && return 0
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
  log "kubernetes $K8S_VERSION: compiling (many minutes cold on 2 cores)"
  (cd "$dir" && go build -trimpath -ldflags "$ld" -o "$BIN/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
  for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do stamp "$b" "$ld"; done
}

build_kwok() {
  local ld="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}"
  fresh kwok "$ld" "$ld" && return 0
  log "kwok $KWOK_VERSION"
  GOBIN="$BIN" go install -trimpath -ldflags "$ld" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  stamp kwok "$ld"
}

# helm's Makefile: K8S_MODULES_MAJOR_VER = client-go's major + 1, MINOR = its minor.
helm_kube_version() {
  local gomod v
  gomod=$(cd "$CACHE/src" && go mod download -json "helm.sh/helm/v3@$HELM_VERSION" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  v=$(sed -n 's/^[[:space:]]*k8s.io\/client-go v\([0-9]*\)\.\([0-9]*\)\..*/\1 \2/p' "$gomod")
  [[ -n "$v" ]] || { log "no k8s.io/client-go in $gomod"; return 1; }
  echo "$(( ${v% *} + 1 )) ${v#* }"
}

build_helm() {
  local kube major minor h=helm.sh/helm/v3
  kube=$(helm_kube_version)
  major=${kube% *}; minor=${kube#* }
  local ld="-s -w -X $h/internal/version.version=$HELM_VERSION -X $h/internal/version.metadata="
  ld+=" -X $h/internal/version.gitTreeState=clean"
  for p in $h/pkg/lint/rules $h/pkg/chartutil; do
    ld+=" -X $p.k8sVersionMajor=$major -X $p.k8sVersionMinor=$minor"
  done
  fresh helm "$ld" "-s -w -X $h/internal/version.version=$HELM_VERSION" && return 0
  log "helm $HELM_VERSION (assumes Kubernetes v$major.$minor without a cluster)"
  GOBIN="$BIN" go install -trimpath -ldflags "$ld" "$h/cmd/helm@$HELM_VERSION"
  stamp helm "$ld"
}

build_prometheus() {
  local out="$BIN/prometheus-$PROMETHEUS_VERSION"
  fresh "prometheus-$PROMETHEUS_VERSION" "-s -w" "-s -w" && return 0
  log "prometheus $PROMETHEUS_VERSION"
  local tmp="$CACHE/src/prometheus-$PROMETHEUS_VERSION"
  mkdir -p "$tmp"
  GOBIN="$tmp" go install -trimpath -tags "remove_all_sd,netgo" -ldflags "-s -w" \
    "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_VERSION"
  mv "$tmp/prometheus" "$out"
  stamp "prometheus-$PROMETHEUS_VERSION" "-s -w"
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

# Kueue's manager and its CRDs (config/components/crd/bases of the same module), for
# the replay peers `kueue` and `kueue-reactive`: bin/kueue-<version>, crds/kueue-<version>/.
build_kueue() {
  local name="kueue-$KUEUE_VERSION" crds="$BIN/crds/kueue-$KUEUE_VERSION"
  local ld="-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION"
  fresh "$name" "$ld" "$ld" && [[ -d "$crds" ]] && return 0
  log "kueue $KUEUE_VERSION"
  local tmp="$CACHE/src/kueue-$KUEUE_VERSION"
  mkdir -p "$tmp"
  GOBIN="$tmp" go install -trimpath -ldflags "$ld" "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
  local dir
  dir=$(cd "$CACHE/src" && go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  rm -rf "$crds.tmp" && mkdir -p "$crds.tmp"
  cp "$dir"/config/components/crd/bases/*.yaml "$crds.tmp/"
  chmod -R u+w "$crds.tmp" && rm -rf "$crds" && mv "$crds.tmp" "$crds"
  mv "$tmp/kueue" "$BIN/$name"
  stamp "$name" "$ld"
}

# kube-state-metrics (module root is its main package): only when KSM_VERSION is set.
build_kube_state_metrics() {
  [[ -n "$KSM_VERSION" ]] || return 0
  local name="kube-state-metrics-$KSM_VERSION" v=github.com/prometheus/common/version
  local ld="-s -w -X $v.Version=${KSM_VERSION#v}"
  fresh "$name" "$ld" && return 0
  log "kube-state-metrics $KSM_VERSION"
  local tmp="$CACHE/src/$name"
  mkdir -p "$tmp"
  GOBIN="$tmp" go install -trimpath -ldflags "$ld" "k8s.io/kube-state-metrics/v2@$KSM_VERSION"
  mv "$tmp/kube-state-metrics" "$BIN/$name"
  stamp "$name" "$ld"
}

build_etcd
build_kwok
build_helm
build_k8s
build_prometheus
fetch_crds
build_kueue
build_kube_state_metrics

elapsed=$(( $(date +%s) - started ))
log "all binaries in $BIN (${elapsed}s this run)"
echo "$BIN"
