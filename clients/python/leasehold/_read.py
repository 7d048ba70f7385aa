"""Reading the coordinator's JSON answers: either field spelling, absent defaults, Struct numbers, times, enums.

Both transports hand :mod:`leasehold.models` JSON objects (the JSON transport as the coordinator sent them,
the gRPC one converted from protobuf messages); these readers make the two read alike.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

JsonObject = dict[str, Any]

_CAMEL: dict[str, str] = {}


def _camel(name: str) -> str:
    c = _CAMEL.get(name)
    if c is None:
        head, *rest = name.split("_")
        c = _CAMEL[name] = head + "".join(p[:1].upper() + p[1:] for p in rest)
    return c


def field_of(d: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """``d[name]`` in its proto or its lowerCamelCase spelling, else ``default``."""
    if name in d:
        return d[name]
    return d.get(_camel(name), default)


def _str(d: Mapping[str, Any], name: str) -> str:
    v = field_of(d, name, "")
    return "" if v is None else str(v)


def _int(d: Mapping[str, Any], name: str) -> int:
    v = field_of(d, name, 0)
    return int(v) if v is not None else 0


def _float(d: Mapping[str, Any], name: str) -> float:
    v = field_of(d, name, 0.0)
    return float(v) if v is not None else 0.0


def _bool(d: Mapping[str, Any], name: str) -> bool:
    return bool(field_of(d, name, False))


# The largest magnitude up to which every integer is a double: ``google.protobuf.Struct`` carries every
# number as a double, so no integer beyond it survives the trip on either transport.
_EXACT = 2**53


def plain_json(value: Any) -> Any:
    """A ``google.protobuf.Struct`` value as the same Python value on both transports.

    A Struct carries every number as a double: over gRPC ``{"frames": 240}`` arrives as ``240.0``, over JSON
    as ``240``. Read through this function, a number is an ``int`` when it is integral and within ±2**53
    (``240.0`` → ``240``, ``-0.0`` → ``0``), else a ``float`` (``240.5``, ``1e300``; an integer beyond 2**53
    could not be carried exactly and reads as the float it became). Lists and dicts are read item by item;
    strings, booleans and ``None`` are kept.

    Example::

        >>> plain_json({"frames": 240.0, "fps": 23.976, "sizes": [1.0, 2.5], "big": 1e300})
        {'frames': 240, 'fps': 23.976, 'sizes': [1, 2.5], 'big': 1e+300}
    """
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() and abs(value) <= _EXACT else value
    if isinstance(value, int):
        return value if abs(value) <= _EXACT else float(value)
    if isinstance(value, Mapping):
        return {str(k): plain_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_json(v) for v in value]
    return value


def _obj(d: Mapping[str, Any], name: str) -> JsonObject | None:
    v = field_of(d, name)
    return plain_json(v) if isinstance(v, Mapping) else None


_FRACTION = re.compile(r"\.(\d+)")


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp as an aware datetime (nanoseconds cut to microseconds); ``None`` when unset."""
    if not value or not isinstance(value, str):
        return None
    text = value.replace("Z", "+00:00").replace("z", "+00:00")
    text = _FRACTION.sub(lambda m: "." + (m.group(1) + "000000")[:6], text, count=1)
    return datetime.fromisoformat(text)


def _time(d: Mapping[str, Any], name: str) -> datetime | None:
    return parse_time(field_of(d, name))


def _enum(d: Mapping[str, Any], name: str, prefix: str, names: tuple[str, ...]) -> str:
    """An enum as its lower-case short name (``JOB_STATUS_FAILED`` → ``failed``); ``""`` when unspecified."""
    v = field_of(d, name)
    if isinstance(v, int):
        return names[v] if 0 <= v < len(names) else str(v)
    if not v:
        return ""
    s = str(v)
    if s.startswith(prefix):
        s = s[len(prefix):]
    s = s.lower()
    return "" if s == "unspecified" else s


def _labels(d: Mapping[str, Any], name: str) -> dict[str, str]:
    v = field_of(d, name)
    return {str(k): str(x) for k, x in v.items()} if isinstance(v, Mapping) else {}


def _list(d: Mapping[str, Any], name: str) -> list[Any]:
    v = field_of(d, name)
    return list(v) if isinstance(v, (list, tuple)) else []


def _msg(d: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    v = field_of(d, name)
    return v if isinstance(v, Mapping) else {}
