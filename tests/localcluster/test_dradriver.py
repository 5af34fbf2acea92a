"""The fake DRA driver's objects: the shapes resource.k8s.io/v1 and NVIDIA's names."""

from __future__ import annotations

import pytest

from extender.localcluster import dradriver, objects


def test_the_slice_holds_the_nodes_gpus_as_one_pool_owned_by_the_node() -> None:
    s = dradriver.render_slice("gpu-node-3", 8, node_uid="u-1")
    assert s["apiVersion"] == "resource.k8s.io/v1" and s["kind"] == "ResourceSlice"
    assert s["metadata"]["name"] == "gpu-node-3-gpu.nvidia.com"
    assert s["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "gpu-node-3", "uid": "u-1",
         "controller": True}]
    spec = s["spec"]
    assert spec["driver"] == "gpu.nvidia.com" and spec["nodeName"] == "gpu-node-3"
    assert spec["pool"] == {"name": "gpu-node-3", "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in spec["devices"]] == [f"gpu-{i}" for i in range(8)]
    assert [d["attributes"]["index"] for d in spec["devices"]] == [{"int": i} for i in range(8)]


def test_a_device_carries_nvidias_attribute_names_and_a_stable_uuid() -> None:
    d = dradriver.render_device("gpu-node-0", 5)
    a = d["attributes"]
    assert {"type", "index", "minor", "uuid", "productName", "brand", "architecture",
            "cudaComputeCapability", "driverVersion", "cudaDriverVersion"} == set(a)
    assert a["type"] == {"string": "gpu"} and a["minor"] == {"int": 5}
    assert a["uuid"]["string"].startswith("GPU-")
    assert a["uuid"] == dradriver.render_device("gpu-node-0", 5)["attributes"]["uuid"]
    assert a["uuid"] != dradriver.render_device("gpu-node-1", 5)["attributes"]["uuid"]
    assert a["cudaComputeCapability"] == {"version": "9.0.0"}
    assert d["capacity"] == {"memory": {"value": "80Gi"}}


@pytest.mark.parametrize(("size", "domains"), [
    (4, [0, 0, 0, 0, 1, 1, 1, 1]),
    (2, [0, 0, 1, 1, 2, 2, 3, 3]),
], ids=["two-domains-of-4", "four-domains-of-2"])
def test_nvlink_domains_number_consecutive_gpus(size: int, domains: list[int]) -> None:
    s = dradriver.render_slice("n", 8, nvlink_domain_size=size)
    assert [d["attributes"]["nvlinkDomain"]["int"] for d in s["spec"]["devices"]] == domains


def test_without_a_domain_size_no_device_says_nvlink() -> None:
    s = dradriver.render_slice("n", 4)
    assert all("nvlinkDomain" not in d["attributes"] for d in s["spec"]["devices"])
    assert "ownerReferences" not in s["metadata"]


def test_the_device_class_selects_the_drivers_gpus_and_serves_the_extended_resource() -> None:
    c = dradriver.render_device_class()
    assert c["kind"] == "DeviceClass" and c["metadata"]["name"] == "gpu.nvidia.com"
    (sel,) = c["spec"]["selectors"]
    assert sel["cel"]["expression"] == (
        "device.driver == 'gpu.nvidia.com' && "
        "device.attributes['gpu.nvidia.com'].type == 'gpu'")
    assert c["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    assert "extendedResourceName" not in dradriver.render_device_class(False)["spec"]


def test_a_claim_pod_holds_a_claim_from_the_template() -> None:
    t = dradriver.render_claim_template("four", 4)
    (req,) = t["spec"]["spec"]["devices"]["requests"]
    assert req == {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                               "allocationMode": "ExactCount", "count": 4}}
    p = dradriver.claim_pod(objects.pod("p"), "four")
    assert p["spec"]["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": "four"}]
    assert p["spec"]["containers"][0]["resources"] == {"claims": [{"name": "gpus"}]}


def test_a_dra_node_offers_no_extended_resource_and_labels_its_gpu_count() -> None:
    n = objects.fake_gpu_node(2, 8, dra=True)
    assert "nvidia.com/gpu" not in n["status"]["allocatable"]
    assert n["metadata"]["labels"][dradriver.GPUS_LABEL] == "8"
    assert objects.fake_gpu_node(2, 8)["status"]["allocatable"]["nvidia.com/gpu"] == "8"
