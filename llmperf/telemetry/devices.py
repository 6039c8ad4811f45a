"""Which NVML device is CUDA device i of this process.

CUDA renumbers devices after CUDA_VISIBLE_DEVICES and may order them
differently from NVML, so indices are matched by UUID: torch reports each CUDA
device's UUID, NVML each physical device's. Without torch's view, the
CUDA_VISIBLE_DEVICES entries are resolved as CUDA would.
"""

from __future__ import annotations

import os
from typing import Any


def normalize_uuid(uuid: str | bytes) -> str:
    """NVML says 'GPU-ab12...', torch says 'ab12...': compare without prefix or case."""
    text = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    text = text.strip().lower()
    for prefix in ("gpu-", "mig-"):
        if text.startswith(prefix):
            return text[len(prefix) :]
    return text


def _visible_from_env(
    nvml: Any, value: str | None, handles: list[Any], by_uuid: dict[str, Any]
) -> list[Any]:
    """The NVML handles CUDA_VISIBLE_DEVICES names, when torch cannot tell us the UUIDs.

    Integer entries are taken as NVML indices, which matches CUDA's order with
    CUDA_DEVICE_ORDER=PCI_BUS_ID or identical devices. Like CUDA, stop at the
    first entry that names no device.
    """
    if value is None:
        return list(handles)
    visible = []
    for token in (t.strip() for t in value.split(",")):
        if token.isdigit():
            handle = handles[int(token)] if int(token) < len(handles) else None
        else:
            matches = [h for u, h in by_uuid.items() if u.startswith(normalize_uuid(token))]
            handle = matches[0] if token and len(matches) == 1 else _mig_handle(nvml, token)
        if handle is None:
            break
        visible.append(handle)
    return visible


def _mig_handle(nvml: Any, uuid: str) -> Any:
    """A MIG instance is no whole GPU, so NVML only finds it by its own UUID."""
    try:
        return nvml.nvmlDeviceGetHandleByUUID(f"MIG-{normalize_uuid(uuid)}")
    except Exception:  # not a MIG instance either: no handle
        return None


def map_devices(
    nvml: Any, device_indices: list[int] | None, cuda_uuids: list[str] | None
) -> tuple[dict[int, Any], dict[str, str]]:
    """NVML handles keyed by CUDA index, and the CUDA devices NVML has no handle for."""
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    by_uuid = {normalize_uuid(nvml.nvmlDeviceGetUUID(h)): h for h in handles}
    if cuda_uuids is None:
        visible: list[Any] = _visible_from_env(
            nvml, os.environ.get("CUDA_VISIBLE_DEVICES"), handles, by_uuid
        )
    else:
        visible = [by_uuid.get(normalize_uuid(u)) or _mig_handle(nvml, u) for u in cuda_uuids]
    indices = list(range(len(visible))) if device_indices is None else device_indices
    bad = [i for i in indices if not 0 <= i < len(visible)]
    if bad:
        raise ValueError(f"device_indices {bad} out of range; valid: 0..{len(visible) - 1}")
    missing = {
        f"gpu{i}": "no NVML device with this CUDA device's UUID"
        for i in indices
        if visible[i] is None
    }
    return {i: visible[i] for i in indices if visible[i] is not None}, missing
