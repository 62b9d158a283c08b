"""What the model proxy checks in a chat-completions body before it forwards
anything (decision 0053): ``messages`` as OpenAI validates them, and the
node's caps on ``n`` and ``max_tokens``/``max_completion_tokens``.

Each refusal is an :class:`Invalid` naming the parameter at fault in OpenAI's
notation (``messages.[0].role``); the proxy answers it as OpenAI does:
400 ``invalid_request_error``.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["ROLES", "Invalid", "check_body"]

#: the message roles OpenAI's chat completions accept
ROLES: Final = ("system", "developer", "user", "assistant", "tool", "function")
#: roles whose content is required (a string or a list of parts)
_CONTENT_REQUIRED: Final = frozenset({"system", "developer", "user", "tool"})


class Invalid(Exception):
    """A parameter OpenAI would refuse: ``(message, param, code)``."""

    def __init__(self, message: str, param: str, code: str = "invalid_value") -> None:
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


def check_body(body: dict[str, Any], *, max_n: int, max_tokens: int) -> None:
    """Refuse a body OpenAI would refuse, or one over the node's caps.

    Raises:
        Invalid: the first parameter at fault.
    """
    _check_messages(body.get("messages"))
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise Invalid("stream must be a boolean", "stream", "invalid_type")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise Invalid("stream_options must be an object", "stream_options", "invalid_type")
    _check_integer(body, "n", max_n)
    for name in ("max_tokens", "max_completion_tokens"):
        _check_integer(body, name, max_tokens)


def _check_integer(body: dict[str, Any], name: str, most: int) -> None:
    value = body.get(name)
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise Invalid(f"Invalid type for '{name}': expected an integer", name, "invalid_type")
    if value < 1:
        raise Invalid(
            f"Invalid '{name}': integer below minimum value. Expected a value >= 1, "
            f"but got {value} instead.",
            name,
            "integer_below_min_value",
        )
    if value > most:
        raise Invalid(
            f"Invalid '{name}': integer above maximum value. Expected a value <= {most} "
            f"(this node's limit), but got {value} instead.",
            name,
            "integer_above_max_value",
        )


def _check_messages(messages: Any) -> None:
    if messages is None:
        raise Invalid(
            "Missing required parameter: 'messages'.", "messages", "missing_required_parameter"
        )
    if not isinstance(messages, list):
        raise Invalid("Invalid type for 'messages': expected an array", "messages", "invalid_type")
    if not messages:
        raise Invalid(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead.",
            "messages",
            "empty_array",
        )
    for index, message in enumerate(messages):
        _check_message(message, f"messages.[{index}]")


def _check_message(message: Any, at: str) -> None:
    if not isinstance(message, dict):
        raise Invalid(f"Invalid type for '{at}': expected an object", at, "invalid_type")
    role = message.get("role")
    if role is None:
        raise Invalid(
            f"Missing required parameter: '{at}.role'.", f"{at}.role", "missing_required_parameter"
        )
    if not isinstance(role, str) or role not in ROLES:
        shown = role if isinstance(role, str) else type(role).__name__
        raise Invalid(
            f"Invalid value: '{str(shown)[:40]}'. Supported values are: "
            + ", ".join(f"'{r}'" for r in ROLES)
            + ".",
            f"{at}.role",
        )
    content = message.get("content")
    if content is None:
        if role in _CONTENT_REQUIRED:
            raise Invalid(
                f"Missing required parameter: '{at}.content'.",
                f"{at}.content",
                "missing_required_parameter",
            )
        if role == "assistant" and not (message.get("tool_calls") or message.get("function_call")):
            raise Invalid(
                f"Missing required parameter: '{at}.content' (an assistant message without "
                "tool_calls or function_call needs content).",
                f"{at}.content",
                "missing_required_parameter",
            )
    elif isinstance(content, list):
        for n, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise Invalid(
                    f"Invalid '{at}.content.[{n}]': each content part must be an object "
                    "with a string 'type'.",
                    f"{at}.content.[{n}]",
                    "invalid_type",
                )
    elif not isinstance(content, str):
        raise Invalid(
            f"Invalid type for '{at}.content': expected one of a string or array of objects",
            f"{at}.content",
            "invalid_type",
        )
    name = message.get("name")
    if name is not None and not isinstance(name, str):
        raise Invalid(
            f"Invalid type for '{at}.name': expected a string", f"{at}.name", "invalid_type"
        )
    if role == "function" and not isinstance(name, str):
        raise Invalid(
            f"Missing required parameter: '{at}.name'.", f"{at}.name", "missing_required_parameter"
        )
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        raise Invalid(
            f"Missing required parameter: '{at}.tool_call_id'.",
            f"{at}.tool_call_id",
            "missing_required_parameter",
        )
    tool_calls = message.get("tool_calls")
    if tool_calls is not None:
        if role != "assistant":
            raise Invalid(
                f"Invalid parameter: '{at}.tool_calls' is only for assistant messages.",
                f"{at}.tool_calls",
            )
        if not isinstance(tool_calls, list) or not all(isinstance(c, dict) for c in tool_calls):
            raise Invalid(
                f"Invalid type for '{at}.tool_calls': expected an array of objects",
                f"{at}.tool_calls",
                "invalid_type",
            )
