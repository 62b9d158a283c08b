"""Shared rooms and the durable relay between connected nodes (decision 0029),
built as one object for the node.

The relay has four parts, each given only what it uses:

- :class:`~.shares.Shares` (``shares.py``): share and unshare rooms, take a
  peer's shares as mirror rooms, keep :class:`SharedRooms` current;
- :class:`~.outbound.Links` (``outbound.py``): one supervised link task per
  accepted connection, draining the ``relay_outbox`` to the peer in order;
- :class:`~.inbound.Receiver` (``inbound.py``): a peer's batch checked and
  applied through :class:`Messages`, idempotently;
- :class:`~.remote.RemoteParticipants` (``remote.py``): the local
  participants (``name@node``, at most Tier 4) that relayed events act as.

The home node passes what arrives from one peer on to the room's other peers
(hub and spoke), never back where it came from: the outbox row of a relayed
change names the connection it came over, and that link skips it
(``store/relay.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import trio

from ..config import Settings
from ..identity import NodeIdentity
from ..services.messages import SharedRooms
from ..store import Database
from .inbound import Receiver
from .outbound import Links
from .remote import RemoteParticipants
from .shares import Shares

if TYPE_CHECKING:
    from ..broker import Broker
    from ..services.accounts import Accounts
    from ..services.messages import Messages
    from ..services.ratelimit import RateLimiter
    from ..services.rooms import Rooms

__all__ = ["Relay"]


class Relay:
    """The relay's parts (:attr:`shares`, :attr:`links`, :attr:`receiver`,
    :attr:`remote`), wired together. Runs inside :meth:`Federation.run`
    (which owns the HTTP client)."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        identity: NodeIdentity,
        *,
        broker: Broker,
        rooms: Rooms,
        messages: Messages,
        accounts: Accounts,
        rate_limits: RateLimiter,
        shared_rooms: SharedRooms,
    ) -> None:
        #: link tasks to peers, and signed calls to them
        self.links = Links(
            settings, db, identity, broker=broker, accounts=accounts, shared_rooms=shared_rooms
        )
        #: shares over connections, and mirrors of peers' rooms
        self.shares = Shares(settings, db, shared_rooms, self.links.post_signed)
        #: remote participants, as the relayed events' actors
        self.remote = RemoteParticipants(db, identity.did, accounts, broker, rooms)
        #: applies peers' batches
        self.receiver = Receiver(settings, db, identity.did, messages, rate_limits, self.remote)

    async def load(self) -> None:
        """Learn which rooms are shared; call before the node takes any write
        (a write in a shared room must reach the outbox)."""
        await self.shares.load()

    async def run(
        self,
        client: httpx.AsyncClient,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run the link tasks with *client* until cancelled (:meth:`Links.run`)."""
        await self.links.run(client, task_status=task_status)
