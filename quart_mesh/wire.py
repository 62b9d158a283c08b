"""Parsing JSON from the network, shared by REST and WebSocket transports.

Checks *types* only; services check values. Every failure is a
:class:`~quart_mesh.errors.BadRequest` with a precise code, never a crash.
"""

from __future__ import annotations

import json
import math
from typing import Any, NoReturn

from .errors import BadRequest

__all__ = ["Fields", "parse_json_object"]


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def parse_json_object(raw: bytes | str) -> dict[str, Any]:
    """Decode a JSON object.

    Raises:
        BadRequest: not UTF-8, not JSON, not an object, or holding lone
            surrogates or NaN/Infinity (``invalid_json``).
    """
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        value = json.loads(text, parse_constant=_reject_constant)
        # lone surrogates ("\ud800") decode fine but cannot be stored or echoed.
        # Without a \u escape the value's strings hold only the text's own
        # characters: strictly decoded bytes have no surrogates, and a str
        # has one only if it cannot be encoded
        if "\\u" in text:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        elif not isinstance(raw, bytes):
            text.encode("utf-8")
    except (UnicodeError, ValueError, RecursionError):
        raise BadRequest("the body is not valid JSON", "invalid_json") from None
    if not isinstance(value, dict):
        raise BadRequest("the body must be a JSON object", "invalid_json")
    return value


class Fields:
    """Typed access to the fields of a decoded JSON object."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def _get(self, name: str, required: bool) -> Any:
        value = self.data.get(name)
        if value is None and required:
            raise BadRequest(f"{name} is required", "missing_field")
        return value

    def req_str(self, name: str) -> str:
        value = self._get(name, True)
        if not isinstance(value, str):
            raise BadRequest(f"{name} must be a string", "invalid_field")
        return value

    def opt_str(self, name: str) -> str | None:
        value = self._get(name, False)
        if value is not None and not isinstance(value, str):
            raise BadRequest(f"{name} must be a string", "invalid_field")
        return value

    def opt_bool(self, name: str) -> bool | None:
        value = self._get(name, False)
        if value is not None and not isinstance(value, bool):
            raise BadRequest(f"{name} must be true or false", "invalid_field")
        return value

    def opt_number(self, name: str) -> float | None:
        value = self._get(name, False)
        if value is None:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise BadRequest(f"{name} must be a finite number", "invalid_field")
        return float(value)

    def req_number(self, name: str) -> float:
        value = self.opt_number(name)
        if value is None:
            raise BadRequest(f"{name} is required", "missing_field")
        return value
