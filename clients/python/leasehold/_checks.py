"""The client's own checks of what a caller hands it, the same on both transports.

Over gRPC a request is a protobuf message, which cannot hold an unknown key or a value of the wrong type;
over JSON the coordinator refuses them. Checked here first, both transports raise the same
:class:`~leasehold.errors.InvalidArgumentError` with the same ``violations`` before anything is sent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from .errors import FieldViolation
from .models import rfc3339

JsonObject = dict[str, Any]

# A TaskSpec's fields in their proto and their JSON (lowerCamelCase) spelling, with the types each takes.
_TASK_FIELDS: dict[str, tuple[str, tuple[type, ...]]] = {
    "chunk_index": ("chunk_index", (int,)), "chunkIndex": ("chunk_index", (int,)),
    "input_uri": ("input_uri", (str,)), "inputUri": ("input_uri", (str,)),
    "input_sha256": ("input_sha256", (str,)), "inputSha256": ("input_sha256", (str,)),
    "parameters": ("parameters", (Mapping, type(None))),
    "workload": ("workload", (str, type(None))),
    "required_labels": ("required_labels", (Mapping, type(None))),
    "requiredLabels": ("required_labels", (Mapping, type(None))),
    "run_at": ("run_at", (str, datetime, type(None))), "runAt": ("run_at", (str, datetime, type(None))),
}
_TYPE_NAMES = {"chunk_index": "an integer", "input_uri": "a string", "input_sha256": "a string",
               "parameters": "an object (dict) or None", "workload": "a string or None",
               "required_labels": "a mapping of label names to values, or None",
               "run_at": "a datetime, an RFC 3339 string or None"}


def labels_json(value: Any, path: str, out: list[FieldViolation]) -> dict[str, str]:
    """Labels (``{"gpu": "a100"}``) as sent, with a violation appended for a value that is no such mapping.

    Only the types: the coordinator judges the names and values themselves (``^[a-z0-9._/-]{1,63}$``, at
    most 16) and names the bad one in its answer (``required_labels[gpu]``), on both transports alike.
    """
    if not isinstance(value, Mapping):
        out.append(FieldViolation(path, f"must be a mapping of label names to values, not {type(value).__name__}"))
        return {}
    labels: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str):
            out.append(FieldViolation(path, f"label name {k!r} is not a string"))
        elif not isinstance(v, str):
            out.append(FieldViolation(f"{path}[{k}]", f"label value must be a string, not {type(v).__name__}"))
        else:
            labels[k] = v
    return labels


def json_violations(value: Any, path: str, out: list[FieldViolation]) -> None:
    """Appends a violation for every part of ``value`` that is not a JSON value a Struct can carry."""
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            out.append(FieldViolation(path, f"{value!r} is not a finite number"))
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                out.append(FieldViolation(path, f"key {k!r} is not a string"))
            else:
                json_violations(v, f"{path}.{k}", out)
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            json_violations(v, f"{path}[{i}]", out)
        return
    out.append(FieldViolation(path, f"a {type(value).__name__} is not a JSON value"))


def task_json(item: Mapping[str, Any], at: str, out: list[FieldViolation]) -> JsonObject:
    """A task given as a mapping, in proto JSON, with a violation appended for each unknown key or wrong type."""
    task: JsonObject = {}
    for key, value in item.items():
        known = _TASK_FIELDS.get(key) if isinstance(key, str) else None
        if known is None:
            out.append(FieldViolation(f"{at}.{key}", "unknown field (known: chunk_index, input_uri, input_sha256, "
                                                      "parameters, workload, required_labels, run_at)"))
            continue
        name, types = known
        if isinstance(value, bool) or not isinstance(value, types):
            out.append(FieldViolation(f"{at}.{name}", f"must be {_TYPE_NAMES[name]}, not {type(value).__name__}"))
            continue
        if isinstance(value, Mapping) and name == "required_labels":
            value = labels_json(value, f"{at}.required_labels", out)
        elif isinstance(value, Mapping):
            json_violations(value, f"{at}.parameters", out)
            value = dict(value)
        if isinstance(value, datetime):
            value = rfc3339(value)
        if value is not None:
            task[name] = value
    return task
