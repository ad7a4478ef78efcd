"""Device strings and TensorFlow's rules for merging them.

``/job:ps/task:0/device:CPU:0`` names one task of a cluster and one device on
it; every field may be missing (``/gpu:1``, ``/job:worker``). A ``with
tf.device(...)`` scope fills the fields an inner scope left open, and device
functions (``replica_device_setter``) decide per op.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["DeviceSpec"]


@dataclass(frozen=True)
class DeviceSpec:
    """A possibly partial device name.

    >>> DeviceSpec.from_string("/job:ps/task:1/cpu:0").to_string()
    '/job:ps/task:1/device:CPU:0'
    """

    job: str | None = None
    replica: int | None = None
    task: int | None = None
    device_type: str | None = None
    device_index: int | None = None

    @classmethod
    def from_string(cls, spec: str | None) -> DeviceSpec:
        fields: dict = {}
        for part in (spec or "").strip("/").split("/"):
            if not part:
                continue
            key, _, rest = part.partition(":")
            key_lower = key.lower()
            if key_lower in ("job", "replica", "task") and rest:
                fields[key_lower] = rest if key_lower == "job" else int(rest)
            elif key_lower == "device" and rest:
                dtype, _, index = rest.partition(":")
                fields["device_type"] = dtype.upper()
                fields["device_index"] = None if index in ("", "*") else int(index)
            elif key_lower in ("cpu", "gpu"):
                fields["device_type"] = key_lower.upper()
                fields["device_index"] = None if rest in ("", "*") else int(rest)
            else:
                raise ValueError(
                    f"cannot parse device {spec!r}: {part!r} is not job:NAME, replica:N, "
                    "task:N, cpu:N, gpu:N or device:TYPE:N"
                )
        return cls(**fields)

    def make_merged_spec(self, other: DeviceSpec) -> DeviceSpec:
        """Fields set in ``other`` win; the rest come from ``self``."""
        changes = {k: v for k, v in vars(other).items() if v is not None}
        if "device_type" in changes and "device_index" not in changes:
            changes["device_index"] = None
        return replace(self, **changes)

    def to_string(self) -> str:
        parts = []
        if self.job is not None:
            parts.append(f"/job:{self.job}")
        if self.replica is not None:
            parts.append(f"/replica:{self.replica}")
        if self.task is not None:
            parts.append(f"/task:{self.task}")
        if self.device_type is not None:
            index = "*" if self.device_index is None else self.device_index
            parts.append(f"/device:{self.device_type}:{index}")
        return "".join(parts)

    def __str__(self) -> str:
        return self.to_string()
