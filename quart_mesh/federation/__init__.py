"""Federation between nodes: signed node-to-node requests and mesh connections.

``signing`` builds and checks the ``X-Mesh-*`` signature headers (no I/O);
``service`` keeps the connections and makes the outbound calls
(``docs/federation.md``, decision 0027).
"""

from __future__ import annotations

from .service import Federation, PeerError
from .signing import NonceCache, canonical_string, sign_request, verify_request

__all__ = [
    "Federation",
    "NonceCache",
    "PeerError",
    "canonical_string",
    "sign_request",
    "verify_request",
]
