"""The public mesh registry and the heartbeat (``docs/federation.md``, decision 0028).

Two sides, both in this module:

* :class:`Heartbeat` (every node with ``registry_url``): while the mesh is set
  up and public, POSTs a signed ``{name, description, url, did, status: "ok",
  members, bots, version}`` to ``{registry_url}/api/meshes/heartbeat`` every
  ``heartbeat_interval`` seconds, the first at start, signed for the registry's
  DID (read from its manifest). When a listed mesh turns
  private it sends one ``status: "withdrawn"``, which removes it. Failures are
  logged and retried at the next interval; they never stop the node.
* :class:`Registry` (a node whose owner or operator turned it on):
  takes those heartbeats, signed with the same scheme as node-to-node
  requests (:mod:`.signing`), checks that each one's ``url`` serves a
  manifest with the signer's DID, and lists the meshes heard from within
  ``registry_ttl`` (``GET /api/meshes/public``).
"""

from __future__ import annotations

import collections
import json
import logging
from functools import partial
from typing import Any

import httpx
import trio

from .._version import __version__
from ..address import PublicAddress
from ..config import Settings
from ..errors import BadRequest, NotFound, RateLimited, Transient
from ..identity import NodeIdentity
from ..records import iso, now_ms
from ..retry import Backoff, retrying
from ..services.accounts import Accounts
from ..services.admin import is_registry
from ..services.ratelimit import RateLimiter
from ..store import Database
from ..store import admin as admin_repo
from ..store import registry as repo
from .http import error_code, exchange, peer_client, unreachable
from .service import HEARTBEAT_PATH, MAX_PEER_NAME_CHARS, _base_url, _is_did
from .signing import sign_request

__all__ = ["HEARTBEAT_PATH", "Heartbeat", "Registry"]

log = logging.getLogger(__name__)

#: where a heartbeat's ``url`` must serve the mesh's manifest (and where a
#: node reads its registry's DID, to sign its heartbeats for it)
MANIFEST_PATH = "/.well-known/mesh-manifest.json"
#: longest description and version string a registry keeps
MAX_DESCRIPTION_CHARS = 2000
MAX_VERSION_CHARS = 64
#: largest member or bot count a registry accepts
MAX_COUNT = 1_000_000_000
#: most meshes ``GET /api/meshes/public`` lists
MAX_LISTED = 1000
STATUSES = ("ok", "withdrawn")


class Registry:
    """This node as a registry: heartbeats in, the public list out.

    Only when the mesh's owner turns it on (``registryEnabled`` in the mesh
    settings) or, unless the owner turned it off, ``MESH_REGISTRY_ENABLED``;
    otherwise both paths answer 404 ``registry_disabled``. A heartbeat lists
    a mesh only when its ``url`` serves a manifest with the signer's DID,
    fetched through the outbound SSRF guard (:mod:`..services.outbound`)
    within ``registry_fetch_timeout`` and ``registry_manifest_max_bytes``; a
    check that passed is trusted for ``registry_verify_ttl`` seconds per
    (DID, URL), in this process's memory. Heartbeats are rate-limited per DID
    (``registry_did``, counted by ``Federation.authenticate`` before the
    signed request's nonce is stored) and manifest checks per client address
    (``registry_address``).
    """

    def __init__(
        self, settings: Settings, db: Database, accounts: Accounts, rate_limits: RateLimiter
    ) -> None:
        self._settings = settings
        self._db = db
        self._accounts = accounts
        self._rate = rate_limits
        #: DID -> (the URL its manifest was checked at, trusted until, trio clock)
        self._verified: collections.OrderedDict[str, tuple[str, float]] = collections.OrderedDict()
        self._fetches = trio.CapacityLimiter(settings.registry_fetch_concurrency)

    @property
    def enabled(self) -> bool:
        """Whether this node is a registry now (the owner's switch, else the setting)."""
        return is_registry(self._settings, self._accounts.mesh)

    def check_enabled(self) -> None:
        """Raises:
        NotFound: ``registry_disabled``, this node is not a registry.
        """
        if not self.enabled:
            raise NotFound("this node is not a registry", "registry_disabled")

    async def receive_heartbeat(
        self, did: str, fields: dict[str, Any], *, address: str | None = None
    ) -> dict[str, Any]:
        """Record (or, ``status: "withdrawn"``, remove) the mesh of the node *did*.

        Args:
            did: the DID that signed the request (already verified, and
                counted against ``registry_did``: ``Federation.authenticate``).
            address: the client's address (``None``: not limited per address).

        Cancellation: safe; a manifest check cut short is not remembered.

        Raises:
            NotFound: ``registry_disabled``.
            BadRequest: ``invalid_field`` (the body's ``did`` is not the
                signer's, or a field is missing, too long or of the wrong type),
                ``invalid_url``, ``manifest_unreachable`` (no manifest could be
                fetched from ``url``), ``manifest_mismatch`` (what ``url``
                serves is not a manifest with the signer's DID).
            RateLimited: too many manifest checks from this address
                (``rate_limited``), or the registry is full of live entries
                (``registry_full``).
        """
        self.check_enabled()
        if fields.get("did") != did:
            raise BadRequest("did must be the signing node's DID", "invalid_field")
        status = fields.get("status")
        if status not in STATUSES:
            raise BadRequest("status must be 'ok' or 'withdrawn'", "invalid_field")
        if status == "withdrawn":
            self._verified.pop(did, None)
            await self._db.write(lambda c: repo.delete_entry(c, did))
            log.info("registry: %s withdrew", did)
            return {"ok": True, "status": "withdrawn"}
        url = fields.get("url")
        if not isinstance(url, str):
            raise BadRequest("url is required", "invalid_field")
        row = repo.RegistryRow(
            did=did,
            name=_text(fields, "name", MAX_PEER_NAME_CHARS, required=True),
            description=_text(fields, "description", MAX_DESCRIPTION_CHARS),
            url=_base_url(url),
            members=_count(fields, "members"),
            bots=_count(fields, "bots"),
            version=_text(fields, "version", MAX_VERSION_CHARS),
            last_seen=now_ms(),
        )
        checked = await self._verify(did, row.url, address)
        cutoff = row.last_seen - int(self._settings.registry_ttl * 1000)
        limit = self._settings.registry_max_entries
        stored = await self._db.write(
            lambda c: repo.upsert_entry(c, row, max_entries=limit, cutoff=cutoff, claim_url=checked)
        )
        if not stored:
            raise RateLimited("the registry is full; try again later", 60, "registry_full")
        return {"ok": True, "status": "ok"}

    async def list_public(self) -> list[dict[str, Any]]:
        """``GET /api/meshes/public``: meshes heard from within ``registry_ttl``, newest first.

        Raises:
            NotFound: ``registry_disabled``.
        """
        self.check_enabled()
        since = now_ms() - int(self._settings.registry_ttl * 1000)
        rows = await self._db.read(lambda c: repo.list_recent(c, since, MAX_LISTED))
        return [
            {
                "name": r.name,
                "description": r.description,
                "url": r.url,
                "did": r.did,
                "members": r.members,
                "bots": r.bots,
                "version": r.version,
                "lastSeen": iso(r.last_seen),
            }
            for r in rows
        ]

    async def _verify(self, did: str, url: str, address: str | None) -> bool:
        """Check that *url* serves a manifest with *did*, unless a check of
        that pair is still trusted; whether a manifest was fetched now.

        Raises:
            RateLimited: too many checks from *address*.
            BadRequest: ``manifest_unreachable``, ``manifest_mismatch``.
        """
        now = trio.current_time()
        known = self._verified.get(did)
        if known is not None and known[0] == url and known[1] > now:
            return False
        await self._rate.address("registry_address", address)
        async with self._fetches:
            served = await self._manifest_did(url)
        if served != did:
            raise BadRequest(
                f"{url}{MANIFEST_PATH} does not serve a manifest with the signing node's DID",
                "manifest_mismatch",
            )
        self._verified.pop(did, None)
        self._verified[did] = (url, trio.current_time() + self._settings.registry_verify_ttl)
        while len(self._verified) > self._settings.registry_max_entries:
            self._verified.popitem(last=False)  # the check made longest ago
        return True

    async def _manifest_did(self, url: str) -> str | None:
        """The ``did`` of the manifest *url* serves (``None``: no manifest's).

        Raises:
            BadRequest: ``manifest_unreachable``.
        """
        target = url + MANIFEST_PATH
        deadline = self._settings.registry_fetch_timeout

        def refused(why: str) -> BadRequest:
            return BadRequest(f"cannot fetch {target}: {why}"[:500], "manifest_unreachable")

        try:
            # one deadline for the whole check: resolving, connecting, the answer;
            # a private address is refused unless the operator allows them
            with trio.fail_after(deadline):
                async with peer_client(
                    deadline,
                    "quart-mesh-registry",
                    allow_private=self._settings.outbound_allow_private,
                ) as client:
                    answer = await exchange(
                        client,
                        "GET",
                        target,
                        limit=self._settings.registry_manifest_max_bytes,
                        deadline=deadline,
                        headers={"Accept": "application/json"},
                    )
        except trio.TooSlowError:
            raise refused(f"no answer within {deadline:g} s") from None
        except httpx.HTTPError as error:
            raise refused(unreachable(error)) from None
        if answer.status != 200:
            raise refused(f"it answered {answer.status}")
        if answer.truncated:
            return None
        try:
            data = json.loads(answer.body)
        except (ValueError, RecursionError):  # RecursionError: nested too deep to parse
            return None
        did = data.get("did") if isinstance(data, dict) else None
        return did if isinstance(did, str) else None


class Heartbeat:
    """Announces this mesh to ``settings.registry_url``; runs in the node's nursery.

    :meth:`run` owns its HTTP client. It waits until the node's address is
    known, then beats every ``heartbeat_interval`` seconds. Heartbeats are
    signed for the registry's DID, read from its manifest
    (``{registry_url}/.well-known/mesh-manifest.json``) before the first one
    and kept until the registry refuses one (then read again). A round that fails
    transiently (the registry unreachable, slow or refusing) is retried with
    backoff (``retry.retrying``, at most one interval apart). Cancellation
    ends the loop at once (no final heartbeat: a stopped node drops out of
    the registry after its TTL).

    An elected singleton (``store/leases.py``, decision 0035): when several
    processes serve the mesh on PostgreSQL, one of them beats.
    """

    def __init__(
        self,
        settings: Settings,
        db: Database,
        identity: NodeIdentity,
        accounts: Accounts,
        address: PublicAddress,
    ) -> None:
        if settings.registry_url is None:
            raise ValueError("Heartbeat needs settings.registry_url")
        self._settings = settings
        self._registry = settings.registry_url.rstrip("/")
        self._db = db
        self._identity = identity
        self._accounts = accounts
        self._address = address
        #: whether the last heartbeat sent listed this mesh (so going private withdraws it)
        self._listed = False
        #: the registry's DID, from its manifest (``None``: read it before the next beat)
        self._audience: str | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        # the registry is the operator's own choice (MESH_REGISTRY_URL), not a
        # URL others name: it may be on a private network
        async with peer_client(
            self._settings.federation_timeout, "quart-mesh-heartbeat", allow_private=True
        ) as client:
            task_status.started()
            await self._address.wait()
            interval = self._settings.heartbeat_interval
            while True:
                await retrying(
                    f"heartbeat to {self._registry}",
                    partial(self.beat, client),
                    backoff=Backoff(min(1.0, interval), interval),
                    logger=log,
                )
                await trio.sleep(interval)

    async def beat(self, client: httpx.AsyncClient) -> str | None:
        """Send one heartbeat if there is one to send; return its status.

        Raises:
            Transient: the registry cannot be reached, is too slow, serves
                no manifest with a DID, or refused the heartbeat.
            Unavailable: the store cannot be read.
        """
        body = await self._body()
        if body is None:
            return None
        audience = await self._registry_did(client)
        raw = json.dumps(body, separators=(",", ":")).encode()
        headers = sign_request(self._identity, "POST", HEARTBEAT_PATH, raw, audience=audience)
        headers["Content-Type"] = "application/json"
        try:
            answer = await exchange(
                client, "POST", self._registry + HEARTBEAT_PATH, content=raw, headers=headers
            )
        except httpx.HTTPError as error:
            raise Transient(f"cannot reach the registry: {type(error).__name__}") from None
        if not 200 <= answer.status < 300:
            # its DID may have changed (bad_signature): read its manifest again next time
            self._audience = None
            # the code says what to fix (manifest_unreachable: the url is not reachable
            # from the registry, e.g. MESH_PUBLIC_URL is not set behind a proxy)
            raise Transient(f"the registry answered {answer.status} {error_code(answer.body)}")
        self._listed = body["status"] == "ok"
        return str(body["status"])

    async def _registry_did(self, client: httpx.AsyncClient) -> str:
        """The registry's DID, which heartbeats are signed for: read from its
        manifest once, then kept (:meth:`beat` forgets it when the registry
        refuses a heartbeat).

        Raises:
            Transient: the manifest cannot be read, or has no valid ``did``.
        """
        if self._audience is not None:
            return self._audience
        url = self._registry + MANIFEST_PATH
        try:
            answer = await exchange(client, "GET", url, headers={"Accept": "application/json"})
        except httpx.HTTPError as error:
            why = type(error).__name__
            raise Transient(f"cannot read the registry's manifest: {why}") from None
        if answer.status != 200:
            raise Transient(f"the registry's manifest answered {answer.status}")
        try:
            data = None if answer.truncated else json.loads(answer.body)
        except (ValueError, RecursionError):  # RecursionError: nested too deep to parse
            data = None
        did = data.get("did") if isinstance(data, dict) else None
        if not isinstance(did, str) or not _is_did(did):
            raise Transient(f"{url} does not serve a mesh manifest with a did")
        self._audience = did
        return did

    async def _body(self) -> dict[str, Any] | None:
        mesh = self._accounts.mesh
        url = self._address.url
        if mesh is None or mesh.visibility != "public" or url is None:
            if not self._listed:
                return None
            return {"did": self._identity.did, "status": "withdrawn"}
        counts = await self._db.read(admin_repo.count_everything)
        return {
            "name": mesh.name,
            "description": mesh.description,
            "url": url.rstrip("/"),
            "did": self._identity.did,
            "status": "ok",
            "members": counts.participants.get("human", 0),
            "bots": counts.participants.get("bot", 0),
            "version": __version__,
        }


def _text(fields: dict[str, Any], name: str, max_chars: int, *, required: bool = False) -> str:
    value = fields.get(name, None if required else "")
    if not isinstance(value, str) or (required and not value.strip()):
        raise BadRequest(f"{name} must be a {'non-empty ' * required}string", "invalid_field")
    if len(value) > max_chars:
        raise BadRequest(f"{name}: at most {max_chars} characters", "invalid_field")
    return value


def _count(fields: dict[str, Any], name: str) -> int:
    value = fields.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise BadRequest(f"{name} must be a whole number from 0 to {MAX_COUNT}", "invalid_field")
    return value
