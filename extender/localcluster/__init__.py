"""A local Kubernetes control plane for tests, benchmarks and the demo.

Runs etcd, kube-apiserver, kube-controller-manager, kube-scheduler (configured
with the gpuroster extender) and the KWOK controller as local processes built
from pinned Go modules by ``build-control-plane.sh`` (package data; binaries in
``~/.cache/gpuroster``); fake GPU nodes are Node objects that KWOK keeps Ready.
No containers, no network beyond 127.0.0.1.

- ``cluster``: :class:`Cluster` (start, stop, nodes, faults), ``binaries_dir``;
- ``commands``: ``gpuroster cluster up|down|status|kubeconfig|...``;
- ``objects``: fake GPU nodes and test pods as plain dicts;
- ``dradriver``: a fake DRA driver (DeviceClass, one ResourceSlice a node) for
  clusters whose GPUs are DRA devices (``Cluster(gpus="dra")``);
- ``pki``, ``processes``, ``rendering``: certificates, child processes, files;
- ``waiting``: polling for a condition.

Product code (the demo, ``gpuroster bench --cluster local``) and the e2e tests
use it alike; nothing here imports ``e2e`` or ``tests``.
"""

from extender.localcluster.cluster import Cluster, ClusterError, binaries_dir
from extender.localcluster.processes import free_port

__all__ = ["Cluster", "ClusterError", "binaries_dir", "free_port"]
