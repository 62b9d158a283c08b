"""The bridge's errors, in one tree::

    BridgeError            the bridge cannot go on: the CLI prints it and exits 1
     ├── TokenRefused      the node refused the token while authenticating
     │                     (an authentication error code such as invalid_token or
     │                     token_expired, or ``removed``: the agent was deleted)
     ├── NodeRefused       the server refused the WebSocket upgrade with a 4xx:
     │                     there is no mesh node at that address
     └── StateFileError    the --state file cannot be read or written
    Disconnected           this connection is over; reconnect with backoff and
                           resume from the last handled cursor (never fatal)
    ResumeAgain            the node replayed only part of the gap
                           (``replay_truncated``): reconnect at once and resume

Library errors (``OSError``, trio-websocket's ``HandshakeError`` and
``ConnectionClosed``, ``trio.BrokenResourceError``) are translated into
``Disconnected`` at the connection boundary (``bridge.py``). Handler failures (a
script that exits non-zero, an endpoint that answers 500) are logged where they
happen and never raise out of a handler.
"""

from __future__ import annotations


class BridgeError(Exception):
    """Fatal: the bridge stops with exit status 1 and this message."""


class TokenRefused(BridgeError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"the node refused the token ({code}): {message}")
        self.code = code


class NodeRefused(BridgeError):
    def __init__(self, url: str, status: int) -> None:
        super().__init__(
            f"{url} refused the WebSocket upgrade with HTTP {status}: "
            "is --mesh the address of a quart-mesh node?"
        )
        self.status = status


class StateFileError(BridgeError):
    pass


class Disconnected(Exception):
    """The connection ended; the bridge reconnects and resumes."""


class ResumeAgain(Disconnected):
    """Reconnect at once (no backoff) to replay the rest of a truncated gap."""
