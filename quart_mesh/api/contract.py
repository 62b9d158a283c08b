"""The REST contract: each endpoint's request and response bodies declared
once, as msgspec ``Struct`` types, and requests validated from them.

A handler declares what it takes and answers::

    @bp.post("/api/rooms")
    @accepts(CreateRoom)
    @answers(RoomView, 201)
    async def create_room(data: CreateRoom) -> tuple[Any, int]: ...

``accepts`` checks the bearer token (unless the endpoint is ``public``), then
decodes the JSON body straight into the type (one pass in C:
``docs/decisions/0047-openapi-contract.md``) and passes it as ``data``;
``query`` does the same for the query string (``args``). ``answers`` only
declares: the OpenAPI document (``api/openapi.py``) is built from these
declarations, and the contract tests check the answers against it.

Transports check *types*; services still check *values* (lengths, shapes),
so REST, WebSocket and bots stay held to the same rules. A body that does
not fit its type is a 400 with the codes the node has always used:
``invalid_json`` (not JSON, not an object), ``missing_field`` (a required
field absent or null), ``invalid_field`` (a field of the wrong type), or
the field's own code where the type says so (``Struct.codes``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, TypeVar

import msgspec
from quart import request

from ..errors import BadRequest
from ._common import caller, token_sent

__all__ = [
    "Body",
    "Contract",
    "OneOf",
    "Query",
    "Shape",
    "accepts",
    "answers",
    "answers_media",
    "contract_of",
    "public",
    "query",
    "raw_body",
    "reads_body",
]

M = TypeVar("M", bound=msgspec.Struct)
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

_ATTRIBUTE = "__mesh_contract__"


class Body(msgspec.Struct, rename="camel"):
    """A request body: fields in snake_case here, camelCase on the wire.

    Unknown fields are ignored (clients newer than the node keep working);
    ``null`` counts as absent for optional fields.
    """

    #: a field's own error code when its value has the wrong type
    codes: ClassVar[dict[str, str]] = {}


class Query(msgspec.Struct, rename="camel"):
    """A query string: every field optional; an empty value counts as absent."""


class Shape(msgspec.Struct, rename="camel"):
    """An answer's shape (declared, not built: handlers render records)."""


class OneOf:
    """An answer that is one of several shapes (by how the endpoint was called)."""

    def __init__(self, *shapes: Any) -> None:
        self.shapes = shapes


class Contract:
    """What one endpoint takes and answers (read by ``api/openapi.py``)."""

    def __init__(self) -> None:
        self.body: type[msgspec.Struct] | None = None
        self.query: type[msgspec.Struct] | None = None
        #: status (or ``"4XX"``, ``"5XX"``) -> the answer's type (a Struct, ``list[Struct]``, ...)
        self.answers: dict[int | str, Any] = {}
        #: ``None``: a bearer token; else the other ways in (``[]``: none)
        self.auth: list[str] | None = None
        #: a public endpoint that checks a token first when one is sent
        self.token_if_sent = False
        #: a body other than JSON (uploads: the raw file)
        self.raw_body: str | None = None
        #: status -> the media type of an answer that is not JSON (a page)
        self.media: dict[int, str] = {}


def contract_of(view: Callable[..., Any]) -> Contract | None:
    """The contract declared on a view function, if any."""
    found: Contract | None = getattr(view, _ATTRIBUTE, None)
    return found


def _contract(view: Callable[..., Any]) -> Contract:
    found = contract_of(view)
    if found is None:
        found = Contract()
        setattr(view, _ATTRIBUTE, found)
    return found


def answers(shape: Any, status: int | str = 200) -> Callable[[F], F]:
    """Declare that the endpoint answers *status* with a body of *shape*
    (``"4XX"`` or ``"5XX"``: its errors, when not an ``ErrorBody``)."""

    def declare(view: F) -> F:
        _contract(view).answers[status] = shape
        return view

    return declare


def answers_media(media_type: str, status: int = 200) -> Callable[[F], F]:
    """Declare that the endpoint answers *status* with a body that is not
    JSON (*media_type*, such as ``text/html``)."""

    def declare(view: F) -> F:
        _contract(view).media[status] = media_type
        return view

    return declare


def public(*ways_in: str, token_if_sent: bool = False) -> Callable[[F], F]:
    """Declare that the endpoint needs no bearer token (*ways_in*: what it
    checks instead, such as ``"signature"`` for a peer's signed request).

    *token_if_sent*: a token, when one is sent, is checked before the body
    (a bad one is a 401 even where none is needed).
    """

    def declare(view: F) -> F:
        contract = _contract(view)
        contract.auth = list(ways_in)
        contract.token_if_sent = token_if_sent
        return view

    return declare


def raw_body(media_type: str) -> Callable[[F], F]:
    """Declare a body that is not JSON (the handler reads it itself)."""

    def declare(view: F) -> F:
        _contract(view).raw_body = media_type
        return view

    return declare


def reads_body(model: type[msgspec.Struct]) -> Callable[[F], F]:
    """Declare the JSON body of an endpoint that reads it itself: one whose
    body is checked as bytes first (a peer's signature) or passed on (the
    model proxy). Its service checks the fields."""

    def declare(view: F) -> F:
        _contract(view).body = model
        return view

    return declare


def accepts(model: type[M]) -> Callable[[F], F]:
    """Decode the JSON body into *model* and pass it as ``data``.

    An empty body counts as ``{}``.

    Raises (from the view):
        BadRequest: see the module's docstring.
        RequestEntityTooLarge: over ``max_body_bytes`` (rendered as 413).
    """
    decoder = msgspec.json.Decoder(model)
    required = _required(model)
    codes: dict[str, str] = getattr(model, "codes", {})

    def wrap(view: F) -> F:
        @functools.wraps(view)
        async def decode_body(*args: Any, **kwargs: Any) -> Any:
            await _token_first(decode_body)
            raw = await request.get_data(cache=False)
            try:
                data = decoder.decode(raw if raw.strip() else b"{}")
            except msgspec.ValidationError as error:
                raise _bad_body(str(error), required, codes) from None
            except (msgspec.DecodeError, ValueError, RecursionError):
                # ValueError: invalid UTF-8 in a string (UnicodeDecodeError);
                # RecursionError: nesting deeper than the decoder goes
                raise BadRequest("the body is not valid JSON", "invalid_json") from None
            return await view(*args, data=data, **kwargs)

        _contract(decode_body).body = model
        return decode_body  # type: ignore[return-value]

    return wrap


def query(model: type[M]) -> Callable[[F], F]:
    """Convert the query string into *model* and pass it as ``args``.

    Each parameter's first value counts; empty values count as absent.

    Raises (from the view):
        BadRequest: a value of the wrong type (``invalid_query``).
    """

    def wrap(view: F) -> F:
        @functools.wraps(view)
        async def convert_query(*args: Any, **kwargs: Any) -> Any:
            await _token_first(convert_query)
            given = {key: value for key, value in request.args.items() if value != ""}
            try:
                parsed = msgspec.convert(given, model, strict=False)
            except msgspec.ValidationError as error:
                raise _bad_query(str(error)) from None
            return await view(*args, args=parsed, **kwargs)

        _contract(convert_query).query = model
        return convert_query  # type: ignore[return-value]

    return wrap


async def _token_first(view: Callable[..., Any]) -> None:
    """The token is checked before the body or query (``docs/rest.md``,
    *Check order*): a caller without one learns nothing about them."""
    contract = contract_of(view)
    if contract is None or contract.auth is None or (contract.token_if_sent and token_sent()):
        await caller()


def _required(model: type[msgspec.Struct]) -> frozenset[str]:
    return frozenset(field.encode_name for field in msgspec.structs.fields(model) if field.required)


_MISSING = re.compile(r"Object missing required field `(?P<field>[^`]*)`(?: - at `\$(?P<at>.*)`)?")
_EXPECTED = re.compile(
    r"Expected `(?P<expected>[^`]*)`, got `(?P<got>[^`]*)`(?: - at `\$(?P<at>.*)`)?"
)
_TYPE_NAMES = {
    "str": "a string",
    "int": "a whole number",
    "float": "a number",
    "bool": "true or false",
    "array": "a list",
    "object": "an object",
}


def _expected(types: str) -> str:
    """msgspec's ``int | null`` as people say it: ``a whole number``."""
    named = [_TYPE_NAMES.get(t, t) for t in types.split(" | ") if t != "null"]
    return " or ".join(named) if named else types


def _where(at: str | None) -> str:
    return (at or "").lstrip(".")


def _bad_body(message: str, required: frozenset[str], codes: dict[str, str]) -> BadRequest:
    if match := _MISSING.match(message):
        at = _where(match["at"])
        name = f"{at}.{match['field']}" if at else match["field"]
        return BadRequest(f"{name} is required", "missing_field")
    if match := _EXPECTED.match(message):
        at = _where(match["at"])
        if not at:
            return BadRequest("the body must be a JSON object", "invalid_json")
        top = re.split(r"[.\[]", at, maxsplit=1)[0]
        if match["got"] == "null" and at in required:
            return BadRequest(f"{at} is required", "missing_field")
        expected = _expected(match["expected"])
        return BadRequest(f"{at} must be {expected}", codes.get(top, "invalid_field"))
    # a constraint of the type (a number out of its range, a value not in a set)
    text, _, at = message.partition(" - at `$")
    where = _where(at.rstrip("`"))
    top = re.split(r"[.\[]", where, maxsplit=1)[0]
    return BadRequest(f"{where}: {text}" if where else text, codes.get(top, "invalid_field"))


def _bad_query(message: str) -> BadRequest:
    if match := _EXPECTED.match(message):
        name = _where(match["at"])
        return BadRequest(f"{name} must be {_expected(match['expected'])}", "invalid_query")
    text, _, at = message.partition(" - at `$")
    where = _where(at.rstrip("`"))
    return BadRequest(f"{where}: {text}" if where else text, "invalid_query")
