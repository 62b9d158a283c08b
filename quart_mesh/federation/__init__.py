"""Federation between nodes: signed node-to-node requests and mesh connections.

``signing`` builds and checks the ``X-Mesh-*`` signature headers (and
remembers nonces in the store);
``http`` makes capped, deadlined calls to other nodes; ``service`` keeps the
connections (``docs/federation.md``, decision 0027); ``registry`` lists
public meshes and sends this mesh's heartbeat to a registry (decision 0028).

Shared rooms and the relay (decision 0029), wired together by ``relay``:
``shares`` (sharing rooms, mirrors of peers' rooms), ``outbound`` (one link
task per accepted connection draining the outbox), ``inbound`` (a peer's
batch applied through the services), ``remote`` (remote participants), and
``peers`` (connection lookups and the handle peers' names get here).
"""

from __future__ import annotations

from .registry import Heartbeat, Registry
from .service import Federation, PeerError
from .signing import Nonces, canonical_string, sign_request, verify_request

__all__ = [
    "Federation",
    "Heartbeat",
    "Nonces",
    "PeerError",
    "Registry",
    "canonical_string",
    "sign_request",
    "verify_request",
]
