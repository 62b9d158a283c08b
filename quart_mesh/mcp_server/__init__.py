"""The node as an MCP server at ``/mcp`` (``docs/agents-mcp-a2a.md``,
decision 0061): the official ``mcp`` SDK's Streamable HTTP server, whose
tools, resources and prompt are thin adapters over the node's services."""

from .endpoint import METADATA_PATH, PATH, McpEndpoint

__all__ = ["METADATA_PATH", "PATH", "McpEndpoint"]
