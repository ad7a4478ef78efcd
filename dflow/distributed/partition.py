"""A task's stages as plain data, to carry them to its worker.

:func:`stages_to_json` and :func:`stages_from_json` write and read the
:class:`~dflow.runtime.passes.Stage` list of one task (planned by
:mod:`~dflow.runtime.passes`) as JSON text, the graph file's encoding of attributes: a
worker never unpickles a plan, and an op type it does not know is refused when the plan is
registered.
"""

from __future__ import annotations

import json

from ..ops.registry import get_opdef
from ..plain_values import decode, encode
from ..runtime.executor import OpNode, Schedule
from ..runtime.passes import Stage

__all__ = ["stages_to_json", "stages_from_json"]


_NODE_FIELDS = ("name", "type", "inputs", "control_inputs", "num_outputs", "device_type")
_STAGE_FIELDS = ("task", "level", "from_client", "receives", "sends", "keeps", "fetches", "applies_updates")


def stages_to_json(stages: list[Stage]) -> str:
    """A task's stages as JSON text: ops with their attributes encoded as in a graph file."""
    def node(n: OpNode) -> dict:
        try:
            attrs = json.loads(json.dumps(encode(n.attrs)))
        except TypeError as error:
            raise TypeError(f"op '{n.name}' ({n.type}) has an attribute that is not plain data, so it "
                            f"cannot be sent to a worker: {error}") from None
        return {**{key: getattr(n, key) for key in _NODE_FIELDS}, "attrs": attrs}

    return json.dumps([{**{key: getattr(stage, key) for key in _STAGE_FIELDS},
                        "nodes": [node(n) for n in stage.schedule.nodes.values()],
                        "waiting": stage.schedule.waiting, "dependents": stage.schedule.dependents,
                        "refcount": stage.schedule.refcount, "outputs": stage.schedule.fetches}
                       for stage in stages])


def stages_from_json(text: str) -> list[Stage]:
    """The stages :func:`stages_to_json` wrote; ValueError for anything else (an op type this
    process does not know, a missing field), naming what is wrong."""
    if not isinstance(text, str):
        raise TypeError(f"a plan's stages arrive as JSON text, got {type(text).__name__}")
    stages = []
    try:
        for entry in json.loads(text):
            nodes = {}
            for n in entry["nodes"]:
                try:  # an unknown op type fails here, not mid-step
                    get_opdef(n["type"])
                except KeyError:
                    raise ValueError(f"op {n['name']!r} has type {n['type']!r}, which dflow does not know "
                                     "here: do the client and the workers run the same dflow?") from None
                nodes[n["name"]] = OpNode(n["name"], n["type"], decode(n["attrs"]), tuple(n["inputs"]),
                                          tuple(n["control_inputs"]), n["num_outputs"], n["device_type"])
            plan = Schedule(nodes, entry["waiting"], entry["dependents"], entry["refcount"],
                            tuple(entry["outputs"]))
            stages.append(Stage(entry["task"], entry["level"], plan, tuple(entry["from_client"]),
                                entry["receives"], {k: tuple(v) for k, v in entry["sends"].items()},
                                tuple(entry["keeps"]), tuple(entry["fetches"]), entry["applies_updates"]))
    except (KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"not a dflow plan's stages ({type(error).__name__}: {error})") from None
    return stages
