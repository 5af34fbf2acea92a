"""The manifests in examples/ against the real API server (and, once, the real scheduler).

- every file passes `kubectl apply --dry-run=server` (schema, defaults,
  admission) in a fresh namespace;
- applied together for real, with `gpuroster serve` on the cluster's extender
  port, the gangs land as examples/README.md says: the 16-GPU gang on two
  whole nodes, the 8-GPU gang on one, and the inference Deployment gets its
  replicas.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from e2e.test_extender import Extender
from extender.localcluster import Cluster
from extender.localcluster.waiting import wait_for

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
FILES = sorted(EXAMPLES.glob("*.yaml"))


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_example_passes_server_side_dry_run(cluster: Cluster, namespace: str,
                                            path: Path) -> None:
    r = cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(path),
                        check=False)
    assert r.returncode == 0, f"{path.name}: {r.stderr}"
    assert "(server dry run)" in r.stdout
    assert "created" in r.stdout or "configured" in r.stdout


def test_examples_run_as_the_readme_says(cluster: Cluster, namespace: str, nodes: list[str],
                                         tmp_path: Path, core: Any) -> None:
    # A 60 s step keeps the inference curve at its night value (1 GPU) for the
    # whole test: 16 + 8 + 2 + 1 + 1 GPUs fit the 32 of the cluster at once.
    ext = Extender(cluster, namespace, tmp_path, GPUROSTER_STEP_SECONDS="60")
    ext.start()
    try:
        r = cluster.kubectl("apply", "-n", namespace, "-f", str(EXAMPLES), check=False)
        assert r.returncode == 0, r.stderr

        def gang_nodes(job: str, pods: int) -> list[str] | None:
            items = core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items
            placed = [p.spec.node_name for p in items if p.spec.node_name]
            return placed if len(items) == pods and len(placed) == pods else None

        big = wait_for(lambda: gang_nodes("pretrain-16", 2), 60, "the 16-GPU gang bound")
        assert len(set(big)) == 2, big  # two whole nodes, one 8-GPU pod on each
        eight = wait_for(lambda: gang_nodes("llm-finetune", 4), 60, "the 8-GPU gang bound")
        assert len(set(eight)) == 1 and eight[0] not in big, eight

        def chat_running() -> bool:
            items = core.list_namespaced_pod(namespace, label_selector="app=chat").items
            return any(p.spec.node_name for p in items)

        wait_for(chat_running, 60, "a replica of the inference Deployment bound")

        # Every GPU pod is either placed or says why it waits.
        def explained() -> bool:
            for p in core.list_namespaced_pod(namespace).items:
                if p.spec.node_name:
                    continue
                conds = {c.type for c in p.status.conditions or []}
                if "gpuroster.io/Planned" not in conds:
                    return False
            return True

        wait_for(explained, 30, "every pending pod to carry the gpuroster.io/Planned condition")
        blocks = {p.metadata.annotations.get("gpuroster.io/block")
                  for p in core.list_namespaced_pod(namespace,
                                                    label_selector="job-name=pretrain-16").items}
        assert len(blocks) == 1 and ".." in blocks.pop()
    finally:
        ext.stop()
        if ext.proc is not None and ext.proc.returncode not in (0, -15):
            print(ext.log())
