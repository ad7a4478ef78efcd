"""The settings of a ``dflow bench`` run: their defaults, and the checks that refuse one that cannot
run (:class:`SettingsError` says which setting and what to use instead)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ..train.allreduce import DEFAULT_FUSION_BYTES

__all__ = ["DEFAULT_SETTINGS", "BENCH_MODELS", "CLUSTERS", "NETWORKS", "OPTIMIZERS", "SettingsError",
           "resolve_settings", "planned_spec", "variable_update_for"]

#: every setting of a run, with its default (``batch_size`` None: the model's own)
DEFAULT_SETTINGS: Mapping = MappingProxyType({
    "model": "cifar10", "batch_size": None, "num_workers": 1, "num_ps": 1,
    "variable_update": "parameter_server", "sync": True, "data_dir": None, "data_format": "NHWC",
    "num_warmup_batches": 10, "num_batches": 100, "repeats": 5, "cluster": "local", "network": "none",
    "ps_strategy": "round_robin", "devices_per_node": 1, "optimizer": "sgd", "eval_accuracy": False,
    # the allreduce's techniques (replicated, distributed_replicated, allreduce)
    "fusion_bytes": DEFAULT_FUSION_BYTES, "overlap": True, "compact_gradient_transfer": False,
    "allreduce_algorithm": "auto",
})
BENCH_MODELS = ("cifar10", "deep_mnist", "mnist_dnn", "inception3", "resnet50")
CLUSTERS = ("local", "cuda", "slurm")  # or a scheduler's ADDRESS
NETWORKS = ("none", "1gbit", "10gbit")
OPTIMIZERS = {"sgd": 0.01, "momentum": 0.01, "adam": 1e-3}  # and the learning rate each runs with


class SettingsError(ValueError):
    """A setting that cannot run; the message says which and what to use instead."""


# ---- settings -------------------------------------------------------------------------------------
def resolve_settings(settings: Mapping) -> dict:
    """``settings`` completed with :data:`DEFAULT_SETTINGS` and checked; raises :class:`SettingsError`.

    >>> resolve_settings({"model": "mnist_dnn"})["batch_size"]  # the model's default
    64
    >>> resolve_settings({"model": "resnet"})
    Traceback (most recent call last):
    ...
    dflow.bench.settings.SettingsError: unknown model 'resnet'; choose one of cifar10, deep_mnist, \
mnist_dnn, inception3, resnet50
    """
    unknown = sorted(set(settings) - set(DEFAULT_SETTINGS))
    if unknown:
        raise SettingsError(f"unknown setting(s) {', '.join(unknown)}; the settings are "
                            f"{', '.join(DEFAULT_SETTINGS)}")
    resolved = {**DEFAULT_SETTINGS, **settings}
    model = _check_model(resolved["model"])
    if resolved["batch_size"] is None:
        resolved["batch_size"] = model.train_defaults["batch_size"]
    _check_numbers(resolved)
    _check_choices(resolved)
    if resolved["data_dir"] is not None:
        resolved["data_dir"] = _store(resolved["data_dir"])
    variable_update_for(resolved, planned_spec(resolved), 0)  # its own checks: async allreduce, ...
    return resolved


def _check_model(name: str):
    from ..models import MODELS

    if name not in BENCH_MODELS:
        raise SettingsError(f"unknown model {name!r}; choose one of {', '.join(BENCH_MODELS)}")
    return MODELS[name]


def _check_numbers(s: dict) -> None:
    at_least = {"batch_size": 1, "num_workers": 1, "num_batches": 1, "repeats": 1, "devices_per_node": 1,
                "num_ps": 0, "num_warmup_batches": 0, "fusion_bytes": 0}
    for key, low in at_least.items():
        if not isinstance(s[key], int) or isinstance(s[key], bool) or s[key] < low:
            raise SettingsError(f"{key} must be an integer of at least {low}, got {s[key]!r}")


def _check_choices(s: dict) -> None:
    from ..distributed.collective import ALGORITHMS
    from ..models import DATA_FORMATS
    from ..train.variable_update import PS_STRATEGIES, VARIABLE_UPDATES

    choices = {"variable_update": VARIABLE_UPDATES, "data_format": DATA_FORMATS, "network": NETWORKS,
               "ps_strategy": PS_STRATEGIES, "optimizer": tuple(OPTIMIZERS), "sync": (True, False),
               "eval_accuracy": (True, False), "overlap": (True, False),
               "compact_gradient_transfer": (True, False), "allreduce_algorithm": ALGORITHMS}
    for key, allowed in choices.items():
        if s[key] not in allowed:
            raise SettingsError(f"{key} must be one of {', '.join(map(str, allowed))}, got {s[key]!r}")
    cluster = s["cluster"]
    if cluster not in CLUSTERS and ":" not in str(cluster):
        raise SettingsError(f"cluster must be {', '.join(CLUSTERS)} or a Dask scheduler's address "
                            f"(tcp://HOST:8786), got {cluster!r}")
    if s["network"] != "none" and cluster != "local":
        raise SettingsError(f"network {s['network']} shapes the links of a cluster it starts on this "
                            f"machine: it needs cluster local, not {cluster!r}")


def _store(data_dir: str) -> str:
    from ..cli_data import store_path

    path = store_path(str(data_dir))
    if path is None:
        raise SettingsError(f"data_dir {data_dir!r} is not a store: prepare one with `dflow data prepare "
                            "NAME --source FILE` (datasets/NAME.zarr), or leave data_dir out for "
                            "synthetic data")
    return path


def planned_spec(s: Mapping) -> dict:
    """The cluster ``s`` asks for, with placeholder addresses: enough for VariableUpdate's checks."""
    workers = s["num_workers"] * s["devices_per_node"]
    return {"ps": [f"planned:{i}" for i in range(s["num_ps"])],
            "worker": [f"planned:{s['num_ps'] + i}" for i in range(workers)]}


def variable_update_for(s: Mapping, spec, task_index: int):
    from ..train.variable_update import VariableUpdate

    try:
        return VariableUpdate(s["variable_update"], spec, task_index, sync=s["sync"],
                              devices_per_node=s["devices_per_node"], ps_strategy=s["ps_strategy"],
                              fusion_bytes=s["fusion_bytes"], overlap=s["overlap"],
                              compression="fp16" if s["compact_gradient_transfer"] else None,
                              algorithm=s["allreduce_algorithm"])
    except ValueError as error:
        raise SettingsError(str(error)) from error
