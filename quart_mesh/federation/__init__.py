"""Federation between nodes: signed node-to-node requests and mesh connections.

``signing`` builds and checks the ``X-Mesh-*`` signature headers (no I/O);
``service`` keeps the connections and makes the outbound calls
(``docs/federation.md``, decision 0027); ``registry`` lists public meshes and
sends this mesh's heartbeat to a registry (decision 0028).
"""

from __future__ import annotations

from .registry import Heartbeat, Registry
from .service import Federation, PeerError
from .signing import NonceCache, canonical_string, sign_request, verify_request

__all__ = [
    "Federation",
    "Heartbeat",
    "NonceCache",
    "PeerError",
    "Registry",
    "canonical_string",
    "sign_request",
    "verify_request",
]
