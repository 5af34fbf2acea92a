"""A fake DRA driver for the local control plane: GPUs as ResourceSlices.

The counterpart of NVIDIA's DRA driver (``gpu.nvidia.com``) for KWOK nodes, which
have no kubelet and no hardware: it publishes the DeviceClass and, for each fake
GPU node, one ResourceSlice (a pool of its own, named after the node) with the
node's GPUs as devices ``gpu-0`` .. ``gpu-<N-1>``. Attribute names follow
NVIDIA's driver (``type``, ``index``, ``minor``, ``uuid``, ``productName``,
``brand``, ``architecture``, ``cudaComputeCapability``, ``driverVersion``,
``cudaDriverVersion``; capacity ``memory``), plus ``nvlinkDomain`` when the node
says which GPUs share an NVLink domain. kube-scheduler's DRA plugin allocates
from these slices as it would from a real driver's; KWOK plays the kubelet, so
nothing prepares the devices.

A slice is owned by its Node (ownerReference): deleting the node lets the
garbage collector delete the slice. ``render_*`` build the objects as dicts (no
I/O, unit-tested); ``publish_class`` and ``publish_node`` write them.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

DRIVER = "gpu.nvidia.com"
DEVICE_CLASS = "gpu.nvidia.com"
GPU_RESOURCE = "nvidia.com/gpu"  # the extended resource the DeviceClass serves too
API_VERSION = "resource.k8s.io/v1"
# The GPUs per node in DRA mode (nodes carry no nvidia.com/gpu there) and, optionally,
# the size of each NVLink domain on it: the fake driver reads these labels as a real
# driver reads the hardware.
GPUS_LABEL = "gpuroster.io/fake-gpus"
NVLINK_LABEL = "gpuroster.io/fake-nvlink-domain-size"
NVLINK_ATTRIBUTE = "nvlinkDomain"
PRODUCT = "NVIDIA H100 80GB HBM3"


def slice_name(node: str) -> str:
    return f"{node}-{DRIVER}"


def device_uuid(node: str, index: int) -> str:
    """Stable per node and index, shaped like an NVIDIA GPU UUID."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}.{index}.{DRIVER}"))


def render_device_class(extended_resource: bool = True) -> dict[str, Any]:
    """The DeviceClass pods name in their claims; with ``extended_resource`` it also
    serves pods that ask for ``nvidia.com/gpu`` on nodes that do not advertise it."""
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": (
        f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'")}}]}
    if extended_resource:
        spec["extendedResourceName"] = GPU_RESOURCE
    return {"apiVersion": API_VERSION, "kind": "DeviceClass",
            "metadata": {"name": DEVICE_CLASS}, "spec": spec}


def render_device(node: str, index: int, nvlink_domain_size: int = 0) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "type": {"string": "gpu"},
        "index": {"int": index},
        "minor": {"int": index},
        "uuid": {"string": device_uuid(node, index)},
        "productName": {"string": PRODUCT},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": "Hopper"},
        "cudaComputeCapability": {"version": "9.0.0"},
        "driverVersion": {"version": "570.124.6"},
        "cudaDriverVersion": {"version": "12.8.0"},
    }
    if nvlink_domain_size > 0:
        attrs[NVLINK_ATTRIBUTE] = {"int": index // nvlink_domain_size}
    return {"name": f"gpu-{index}", "attributes": attrs,
            "capacity": {"memory": {"value": "80Gi"}}}


def render_slice(node: str, gpus: int, *, node_uid: str | None = None,
                 nvlink_domain_size: int = 0, generation: int = 1) -> dict[str, Any]:
    """The one ResourceSlice of ``node``: its ``gpus`` GPUs, a pool of its own."""
    meta: dict[str, Any] = {"name": slice_name(node)}
    if node_uid:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node,
                                    "uid": node_uid, "controller": True}]
    return {
        "apiVersion": API_VERSION, "kind": "ResourceSlice", "metadata": meta,
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [render_device(node, i, nvlink_domain_size) for i in range(gpus)],
        },
    }


def render_claim_template(name: str, gpus: int, request: str = "gpus") -> dict[str, Any]:
    """A ResourceClaimTemplate asking for ``gpus`` GPUs of the DeviceClass."""
    return {"apiVersion": API_VERSION, "kind": "ResourceClaimTemplate",
            "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [{"name": request, "exactly": {
                "deviceClassName": DEVICE_CLASS, "allocationMode": "ExactCount",
                "count": gpus}}]}}}}


def claim_pod(pod: dict[str, Any], template: str, claim: str = "gpus") -> dict[str, Any]:
    """``pod`` (objects.pod, no GPU request) with its first container holding claim
    ``claim`` made from ResourceClaimTemplate ``template``."""
    spec = pod["spec"]
    spec["resourceClaims"] = [{"name": claim, "resourceClaimTemplateName": template}]
    spec["containers"][0].setdefault("resources", {})["claims"] = [{"name": claim}]
    return pod


# --- writing ----------------------------------------------------------------------


def _resource(api: ApiClient) -> Any:
    from kubernetes import client

    return client.ResourceV1Api(api)


def publish_class(api: ApiClient) -> None:
    """Create the DeviceClass (kept if it is there)."""
    from kubernetes.client.exceptions import ApiException

    try:
        _resource(api).create_device_class(render_device_class())
    except ApiException as e:
        if e.status != 409:
            raise


def publish_node(api: ApiClient, node: dict[str, Any]) -> None:
    """Publish (or replace) the slice of fake GPU node ``node`` (as read back: its uid
    makes it the slice's owner), with the GPUs its labels give."""
    from kubernetes.client.exceptions import ApiException

    meta = node["metadata"]
    labels = meta.get("labels") or {}
    body = render_slice(meta["name"], int(labels.get(GPUS_LABEL, "0")), node_uid=meta["uid"],
                        nvlink_domain_size=int(labels.get(NVLINK_LABEL, "0")))
    res = _resource(api)
    try:
        res.create_resource_slice(body)
    except ApiException as e:
        if e.status != 409:
            raise
        old = res.read_resource_slice(body["metadata"]["name"])
        body["metadata"]["resourceVersion"] = old.metadata.resource_version
        body["spec"]["pool"]["generation"] = int(old.spec.pool.generation) + 1
        res.replace_resource_slice(body["metadata"]["name"], body)
