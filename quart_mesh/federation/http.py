"""Calls to other nodes whose answers are read with a size cap: a peer (or a
registry) cannot make this node buffer an answer of any size, nor make it
fail by what it answers (JSON nested too deep to parse is not JSON) or by
an address that cannot be looked up (a peer that cannot be reached).

The client to other nodes reaches only public addresses unless the operator
allows private ones (``MESH_OUTBOUND_ALLOW_PRIVATE``): a URL a peer claims
(or an admin was given) cannot make this node call its own network
(``services/outbound.py``). A refused address is an unreachable peer."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx
import trio

from ..errors import BadGateway
from ..identity import NodeIdentity
from ..services.outbound import PublicOnlyTransport, RefusedAddress, tls_context
from .signing import sign_request

__all__ = [
    "Answer",
    "PeerError",
    "error_code",
    "exchange",
    "json_object",
    "peer_client",
    "post_signed",
    "unreachable",
]

#: most bytes of a peer's answer read by default
DEFAULT_LIMIT = 64 * 1024
#: seconds an exchange may take in all, when the client sets no timeout
DEFAULT_DEADLINE = 30.0
#: what lets a call reach a private address (named when one is refused)
ALLOW_PRIVATE = "set MESH_OUTBOUND_ALLOW_PRIVATE=true to allow private addresses (labs only)"


def peer_client(timeout: float, user_agent: str, *, allow_private: bool) -> httpx.AsyncClient:
    """The HTTP client for calls to other nodes and registries: a time limit,
    no redirects followed, no proxy settings taken from the environment, and
    unless *allow_private*, only public addresses, each connection pinned to
    the address checked (:class:`~quart_mesh.services.outbound.PublicOnlyTransport`;
    a private one fails as :class:`~quart_mesh.services.outbound.RefusedAddress`,
    an ``httpx.ConnectError``)."""
    return httpx.AsyncClient(
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
        headers={"User-Agent": user_agent},
        verify=tls_context(),
        transport=None if allow_private else PublicOnlyTransport(allowed_by=ALLOW_PRIVATE),
    )


def unreachable(error: httpx.HTTPError) -> str:
    """Why a peer could not be reached, as its admin reads it: the kind of
    failure, or for an address the guard refused, what would allow it."""
    return str(error) if isinstance(error, RefusedAddress) else type(error).__name__


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: httpx.Headers
    #: at most the limit's worth of the body
    body: bytes
    #: the body was longer than the limit (and was cut)
    truncated: bool


async def exchange(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    limit: int = DEFAULT_LIMIT,
    deadline: float | None = None,
    **kwargs: Any,
) -> Answer:
    """Send a request; read at most *limit* bytes of the answer, all within
    *deadline* seconds (default: the client's timeout) from the start:
    resolving the name, connecting, sending and reading included. httpx's
    own timeouts apply to each step, so a peer trickling its answer a byte
    at a time would otherwise hold the call for ever.

    Raises:
        httpx.HTTPError: the peer could not be reached (also when *url*'s
            host is a name that cannot be looked up: ``httpx.ConnectError``),
            the exchange failed, or it did not finish within the deadline
            (``httpx.TimeoutException``).
    """
    if deadline is None:
        deadline = client.timeout.read or DEFAULT_DEADLINE
    try:
        with trio.fail_after(deadline):
            async with client.stream(method, url, **kwargs) as response:
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > limit:
                        return Answer(
                            response.status_code, response.headers, b"".join(chunks), True
                        )
                    chunks.append(chunk)
                return Answer(response.status_code, response.headers, b"".join(chunks), False)
    except trio.TooSlowError:
        raise httpx.TimeoutException(f"no complete answer within {deadline:g} s") from None
    except (UnicodeError, httpx.InvalidURL) as error:
        # a label IDNA cannot encode (httpx, or the resolver): no such peer
        raise httpx.ConnectError(f"invalid address: {error}"[:300]) from None


class PeerError(BadGateway):
    """The peer node could not be reached (``peer_unreachable``) or refused
    (``peer_refused``); its own errors are never passed through."""

    default_code = "peer_unreachable"


async def post_signed(
    client: httpx.AsyncClient,
    identity: NodeIdentity,
    base: str,
    path: str,
    body: dict[str, Any],
    *,
    audience: str,
) -> dict[str, Any]:
    """POST *body* to the peer at *base*, signed with this node's key for the
    peer's DID *audience*; its JSON answer.

    Raises:
        PeerError: unreachable, too slow, refused (non-2xx) or an invalid answer.
    """
    raw = json.dumps(body, separators=(",", ":")).encode()
    headers = sign_request(identity, "POST", path, raw, audience=audience)
    headers["Content-Type"] = "application/json"
    url = f"{base}{path}"
    try:
        answer = await exchange(client, "POST", url, content=raw, headers=headers)
    except httpx.HTTPError as error:
        raise PeerError(f"cannot reach {base}: {unreachable(error)}") from None
    if not 200 <= answer.status < 300:
        code = error_code(answer.body)
        raise PeerError(f"the peer refused ({answer.status} {code})", "peer_refused")
    return json_object(answer, url)


def json_object(answer: Answer, url: str) -> dict[str, Any]:
    raw = answer.body
    if answer.truncated:
        raise PeerError(f"{url} answered too much", "peer_invalid")
    try:
        data = json.loads(raw) if raw.strip() else {}
    except (ValueError, RecursionError):  # RecursionError: nested too deep to parse
        raise PeerError(f"{url} did not answer JSON", "peer_invalid") from None
    if not isinstance(data, dict):
        raise PeerError(f"{url} did not answer a JSON object", "peer_invalid")
    return data


def error_code(raw: bytes) -> str:
    """The ``code`` of an error answer's JSON body (``error`` if it has none)."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return "error"
    code = data.get("code") if isinstance(data, dict) else None
    return code[:64] if isinstance(code, str) and code.isascii() else "error"
