"""``device_lib.list_local_devices()``: the devices this process computes on, as TF lists them.

>>> from dflow.python.client import device_lib
>>> [d.device_type for d in device_lib.list_local_devices()][0]
'CPU'
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...runtime.devices import gpu_namespace

__all__ = ["DeviceAttributes", "list_local_devices"]


@dataclass(frozen=True)
class DeviceAttributes:
    """TF's ``DeviceAttributes`` fields that scripts read."""

    name: str
    device_type: str
    memory_limit: int
    physical_device_desc: str = ""
    incarnation: int = 0


def list_local_devices(session_config=None) -> list[DeviceAttributes]:
    """The CPU, then each GPU CuPy sees (``/device:GPU:i``)."""
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 0
    devices = [DeviceAttributes("/device:CPU:0", "CPU", int(pages))]
    if gpu_namespace() is not None:
        import cupy

        for i in range(cupy.cuda.runtime.getDeviceCount()):
            with cupy.cuda.Device(i):
                _, total = cupy.cuda.runtime.memGetInfo()
            props = cupy.cuda.runtime.getDeviceProperties(i)
            name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
            devices.append(DeviceAttributes(f"/device:GPU:{i}", "GPU", int(total),
                                            f"device: {i}, name: {name}"))
    return devices
