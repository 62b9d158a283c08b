"""Claiming a new node: the one-time setup code (decision 0055).

A node that is not set up belongs to whoever calls ``POST /api/setup/init``
first. On a node that listens only on loopback that can only be someone on
the machine, as before. A node that listens on another address (``--host
0.0.0.0``, a public address), that trusts a proxy (``MESH_TRUSTED_PROXIES``:
the internet reaches it through one), or that runs with
``MESH_SETUP_CODE=always`` asks for a setup code: made once, written in
the data folder (``setup-code``, mode 0600) so that every worker process of
the node asks for the same one, and logged by the node when it starts. The
first setup that gives it owns the node; the file is removed then, and on any
later start of a node that is set up.

Under a stock ASGI server the node does not know what the server binds: it
asks for the code when the request came in on a non-loopback address of the
server (its ASGI ``server``).
"""

from __future__ import annotations

import contextlib
import hmac
import secrets
from pathlib import Path
from typing import Final

import trio

from ..client_address import is_loopback
from ..config import Settings
from ..data_folder import create_once
from ..errors import Forbidden

__all__ = ["SETUP_CODE_FILE", "SetupClaim", "new_setup_code"]

#: the file in the data folder that holds the code while the node is not set up
SETUP_CODE_FILE: Final = "setup-code"
#: letters and digits no one mistakes for one another (32: 5 bits each)
_ALPHABET: Final = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
#: the longest setup code compared (longer ones are wrong without more work)
_LONGEST: Final = 64


def new_setup_code() -> str:
    """A fresh code: 16 characters (80 bits) in four groups, ``ABCD-EFGH-...``."""
    chars = "".join(secrets.choice(_ALPHABET) for _ in range(16))
    return "-".join(chars[i : i + 4] for i in range(0, 16, 4))


def _normal(code: str) -> bytes:
    """As compared: upper case, without spaces and hyphens (as people type it)."""
    return "".join(code.split()).replace("-", "").upper().encode("utf-8")


class SetupClaim:
    """Whether the first setup needs the code, and checking it."""

    def __init__(self, settings: Settings) -> None:
        self._path: Path = settings.data_dir / SETUP_CODE_FILE
        # a node that trusts a proxy is reached from outside through it,
        # whatever it binds: it asks too
        self._always = settings.setup_code == "always" or bool(settings.trusted_proxies)
        self._code: str | None = None
        #: where the node listens: ``True`` somewhere else than loopback,
        #: ``False`` loopback only, ``None`` unknown (a stock ASGI server)
        self._public: bool | None = False
        #: :meth:`prepare` ran: the node is served on a socket (not an
        #: in-process test client, which nobody can reach)
        self._prepared = False
        #: the node is set up: nothing is asked any more
        self._done = False

    async def prepare(self, *, public: bool | None, initialized: bool) -> str | None:
        """At start, once the node knows whether it is set up and where it
        listens (*public*, see ``_public``).

        Returns:
            The code, when one may be needed (the caller logs it), else ``None``.
        """
        self._prepared = True
        self._public = public
        if initialized:
            await self.discard()
            return None
        if not (self._always or public is not False):
            return None
        self._code = await trio.to_thread.run_sync(create_once, self._path, new_setup_code)
        return self._code

    def required(self, server_host: str | None) -> bool:
        """Whether a setup arriving at *server_host* (the server's address on
        that connection) needs the code."""
        if not self._prepared or self._done:
            return False
        if self._always:
            return True
        if self._public is None:
            return server_host is None or not is_loopback(server_host)
        return self._public

    def check(self, given: str | None, server_host: str | None) -> None:
        """Raises:
        Forbidden: the code is needed and *given* is missing
            (``setup_code_required``) or not it (``invalid_setup_code``).
        """
        if not self.required(server_host):
            return
        if not given:
            raise Forbidden(
                "this node asks for its setup code: it is in the node's log (and in the"
                f" file {SETUP_CODE_FILE} of its data folder)",
                "setup_code_required",
            )
        code = self._code
        ok = code is not None and len(given) <= _LONGEST
        # compared in constant time (for codes of one length)
        if not hmac.compare_digest(_normal(given[:_LONGEST]), _normal(code or "")) or not ok:
            raise Forbidden("wrong setup code", "invalid_setup_code")

    async def discard(self) -> None:
        """The node is set up: the code is used (or no longer needed)."""
        self._code = None
        self._done = True
        await trio.to_thread.run_sync(self._remove)

    def _remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()
