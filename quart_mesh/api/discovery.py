"""Discovery (spec §1, §4.16): ``GET /skill.md`` and ``GET /.well-known/mesh-manifest.json``.

Both are public. Their addresses come from the node's public URL (as the
bootstrap answer's do), falling back to the request's own host.
"""

from __future__ import annotations

from quart import Blueprint, Response, current_app, request
from werkzeug.routing import MapAdapter

from ..services import discovery
from ._common import node

bp = Blueprint("discovery", __name__)


@bp.get("/skill.md")
async def skill() -> Response:
    mesh_node = node()
    text = discovery.render_skill(
        addresses=_addresses(),
        mesh=mesh_node.accounts.mesh,
        settings=mesh_node.settings,
        did=mesh_node.identity.did,
        capabilities=_capabilities(),
    )
    return Response(
        text,
        content_type="text/markdown; charset=utf-8",
        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
    )


@bp.get("/.well-known/mesh-manifest.json")
async def manifest() -> tuple[dict[str, object], int, dict[str, str]]:
    mesh_node = node()
    data = await discovery.manifest(
        mesh_node.db,
        addresses=_addresses(),
        mesh=mesh_node.accounts.mesh,
        identity=mesh_node.identity,
        capabilities=_capabilities(),
        federation_enabled=mesh_node.settings.federation_enabled,
        registry=mesh_node.settings.registry_url,
        is_registry=mesh_node.registry.enabled,
    )
    # public facts, meant to be read by other sites' pages too
    return data, 200, {"Cache-Control": "no-cache", "Access-Control-Allow-Origin": "*"}


def _addresses() -> discovery.Addresses:
    return discovery.Addresses.from_base(node().address.url or request.host_url)


def _capabilities() -> list[str]:
    adapter: MapAdapter = current_app.url_map.bind("localhost")
    return discovery.capabilities(lambda method, path: adapter.test(path, method))
