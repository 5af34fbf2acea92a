"""Local Kubernetes control plane for tests, benchmarks and demos.

Runs etcd, kube-apiserver, kube-controller-manager, kube-scheduler (configured
with the gpuroster extender) and the KWOK controller as local processes built
by ``e2e/build-control-plane.sh``; fake GPU nodes are Node objects that KWOK
keeps Ready. No containers, no network beyond 127.0.0.1.

Public entry point: :class:`e2e.cluster.Cluster`.
"""
