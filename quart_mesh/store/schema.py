"""The relational schema (SQLAlchemy Core). Alembic migrations create it.

Times are integer milliseconds since the Unix epoch (UTC); the API renders
them as ISO 8601. ``messages.seq`` is the per-node cursor: with SQLite's
AUTOINCREMENT it only ever grows, so a cursor is never reused after deletes.
Cursor and sequence columns are 64-bit (:data:`Seq`): BIGINT on PostgreSQL,
INTEGER on SQLite (already 64-bit there, and the only type AUTOINCREMENT
accepts).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy import false as sa_false
from sqlalchemy import true as sa_true

#: a cursor or sequence position: 64-bit on every backend
Seq = BigInteger().with_variant(Integer(), "sqlite")

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

mesh_config = Table(
    "mesh_config",
    metadata,
    Column("id", Integer, primary_key=True),  # always 1: one mesh per node
    Column("name", String(200), nullable=False),
    Column("description", Text, nullable=False, default=""),
    Column("visibility", String(16), nullable=False),
    Column("registration_mode", String(16), nullable=False),
    Column("guests_can_send", Boolean, nullable=False, default=False),
    Column("owner_id", String(26), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    # the room new participants are offered (created by setup); NULL for none
    Column("default_room_id", String(26), nullable=True),
)

participants = Table(
    "participants",
    metadata,
    Column("participant_id", String(26), primary_key=True),
    Column("name", String(200), nullable=False),
    # casefolded name: "Alice" and "alice" are one name
    Column("name_key", String(200), nullable=False, unique=True),
    Column("kind", String(16), nullable=False),  # human | guest | bot
    Column("type", String(32), nullable=False),  # human | guest | a bot type
    Column("role", String(64), nullable=False),
    Column("password_hash", Text, nullable=True),
    Column("description", Text, nullable=False, default=""),
    Column("created_at", BigInteger, nullable=False),
    Column("last_seen_at", BigInteger, nullable=True),
    # the home node's DID of a remote participant (federation); NULL for local ones
    Column("origin_did", String(128), nullable=True),
    # tokens issued before this time (unix seconds) are refused: "sign out
    # everywhere" (migration 0020, docs/decisions/0046-operator-chores.md)
    Column("tokens_not_before", BigInteger, nullable=True),
    # the confusable skeletons of the name as written and of its lower case
    # (quart_mesh/names.py), each unique, so that "owner" with a Cyrillic o
    # cannot stand beside "owner"; NULL only for a name that shared one with
    # an older name when migration 0021_names came
    # (docs/decisions/0056-trusted-names-and-inert-uploads.md)
    Column("name_skeleton", String(400), nullable=True),
    Column("folded_skeleton", String(400), nullable=True),
    # a name to show beside the unique one, spaces allowed; NULL: none
    # (migration 0030, issue 32)
    Column("display_name", String(200), nullable=True),
    # whether its read position in DMs is shown to the other members (and
    # theirs to it): migration 0031, decision 0071
    Column("read_receipts", Boolean, nullable=False, server_default=sa_true()),
    Index("ix_participants_name_skeleton", "name_skeleton", unique=True),
    Index("ix_participants_folded_skeleton", "folded_skeleton", unique=True),
)

rooms = Table(
    "rooms",
    metadata,
    Column("room_id", String(26), primary_key=True),
    Column("kind", String(8), nullable=False),  # room | dm
    Column("name", String(200), nullable=False),
    # casefolded name of an ordinary room (unique); NULL for DMs
    Column("name_key", String(200), nullable=True, unique=True),
    # "<participantId>:<participantId>" sorted, for the one DM of a pair; NULL otherwise
    Column("dm_key", String(64), nullable=True, unique=True),
    Column("description", Text, nullable=False, default=""),
    Column("created_by", String(26), nullable=True),
    Column("created_at", BigInteger, nullable=False),
    # a permission preset (announcements, humans_only, read_only) or NULL
    Column("preset", String(32), nullable=True),
    # who set the preset (NULL: the room's creator, or before migration 0025)
    Column("preset_set_by", String(26), nullable=True),
    # the home node's DID of a room shared with this node (federation); NULL otherwise
    Column("origin_did", String(128), nullable=True),
    # an ordinary room name's confusable skeletons (unique, as participants');
    # NULL for DMs
    Column("name_skeleton", String(400), nullable=True),
    Column("folded_skeleton", String(400), nullable=True),
    # bumped by each change to the room's description (PATCH
    # /api/rooms/:roomId): the snapshot's fingerprint sums it (migration 0030)
    Column("revision", Integer, nullable=False, server_default="0"),
    Index("ix_rooms_name_skeleton", "name_skeleton", unique=True),
    Index("ix_rooms_folded_skeleton", "folded_skeleton", unique=True),
)

room_members = Table(
    "room_members",
    metadata,
    Column(
        "room_id",
        String(26),
        ForeignKey("rooms.room_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column(
        "participant_id",
        String(26),
        ForeignKey("participants.participant_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("joined_at", BigInteger, nullable=False),
    # a DM the participant removed from its list; cleared by a new message
    Column("hidden", Boolean, nullable=False, default=False),
    # the member muted the room: unread still counts, only mentions notify
    Column("muted", Boolean, nullable=True),
    Index("ix_room_members_participant_id", "participant_id"),
)

messages = Table(
    "messages",
    metadata,
    Column("seq", Seq, primary_key=True, autoincrement=True),
    Column("message_id", String(26), nullable=False, unique=True),
    Column(
        "room_id",
        String(26),
        ForeignKey("rooms.room_id", ondelete="CASCADE"),
        nullable=False,
    ),
    # no foreign key: the sender may later be deleted or live on another node
    Column("sender_id", String(26), nullable=False),
    Column("sender_name", String(200), nullable=False),
    Column("content", Text, nullable=False),
    Column("to_id", String(26), nullable=True),
    Column("thread_id", String(26), nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("edited_at", BigInteger, nullable=True),
    # the sender's home node DID for a relayed message (federation); NULL for local ones
    Column("origin_did", String(128), nullable=True),
    # the sender's own id for the send (idempotent retries); NULL if none was given
    Column("client_id", String(64), nullable=True),
    # a relayed message whose claimed time was not sane, dated on arrival instead
    Column("time_replaced", Boolean, nullable=True),
    Index("ix_messages_room_id_seq", "room_id", "seq"),
    Index("ix_messages_sender_id_client_id", "sender_id", "client_id", unique=True),
    Index("ix_messages_thread_id", "thread_id"),
    sqlite_autoincrement=True,
)

# the full-text index's progress (``store/search.py``): one row; messages at
# or below ``pending_below`` are still to be (re)indexed; ``config``: the
# PostgreSQL text search configuration the index was built with
search_index = Table(
    "search_index",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("pending_below", BigInteger, nullable=True),
    Column("config", String(64), nullable=True),
)

reactions = Table(
    "reactions",
    metadata,
    Column(
        "message_id",
        String(26),
        ForeignKey("messages.message_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("participant_id", String(26), primary_key=True),
    Column("emoji", String(64), primary_key=True),
    Column("created_at", BigInteger, nullable=False),
)

#: pinned messages (migration 0030, decision 0069): at most ``MAX_PINS`` a
#: room; a message's pin goes with it
pins = Table(
    "pins",
    metadata,
    Column(
        "message_id",
        String(26),
        ForeignKey("messages.message_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("room_id", String(26), ForeignKey("rooms.room_id", ondelete="CASCADE"), nullable=False),
    Column("pinned_by", String(26), nullable=False),
    Column("pinned_at", BigInteger, nullable=False),
    Index("ix_pins_room_id", "room_id"),
)

positions = Table(
    "positions",
    metadata,
    Column(
        "participant_id",
        String(26),
        ForeignKey("participants.participant_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("room_id", String(26), ForeignKey("rooms.room_id", ondelete="CASCADE"), nullable=False),
    Column("x", Float, nullable=False),
    Column("y", Float, nullable=False),
    Column("z", Float, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
)

# how far each participant has read in each room (for unread counts)
room_reads = Table(
    "room_reads",
    metadata,
    Column(
        "participant_id",
        String(26),
        ForeignKey("participants.participant_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column(
        "room_id",
        String(26),
        ForeignKey("rooms.room_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("last_read_seq", Seq, nullable=False),
)

# bots: the participant row holds name, type and role; this holds how it connects
agents = Table(
    "agents",
    metadata,
    Column(
        "agent_id",
        String(26),
        ForeignKey("participants.participant_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("managed", Boolean, nullable=False),
    Column("webhook_url", Text, nullable=True),
    # HMAC key the node signs webhook deliveries with (the node's, not the user's)
    Column("webhook_secret", String(64), nullable=True),
    Column("created_by", String(26), nullable=True),
    Column("created_at", BigInteger, nullable=False),
    # managed bots: the model, the rooms to join (JSON list), whether an API key
    # was given at spawn (the key itself is never stored)
    Column("model", Text, nullable=True),
    Column("rooms", Text, nullable=True),
    Column("needs_key", Boolean, nullable=False, server_default=sa_false()),
    # the last message cursor delivered to a webhook bot (the message log is its
    # queue) or acknowledged by a managed bot (it resumes after it)
    Column("delivery_cursor", BigInteger, nullable=True),
    # may its webhook target loopback/private addresses (registered by an admin)
    Column("webhook_private_ok", Boolean, nullable=False, server_default=sa_false()),
    # an A2A agent: a skill of the node's card, reachable at /a2a/agents/<id>
    Column("a2a", Boolean, nullable=False, server_default=sa_false()),
)

#: structured commands sent to agents (POST /api/agents/:id/command)
agent_commands = Table(
    "agent_commands",
    metadata,
    Column("command_id", String(26), primary_key=True),
    Column(
        "agent_id",
        String(26),
        ForeignKey("participants.participant_id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("command", String(64), nullable=False),
    Column("args", Text, nullable=False),  # JSON object
    Column("sent_by", String(26), nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("delivered_at", BigInteger, nullable=True),
    Column("completed_at", BigInteger, nullable=True),
    Column("ok", Boolean, nullable=True),
    Column("result", Text, nullable=True),  # JSON
    Index("ix_agent_commands_agent_id_delivered_at", "agent_id", "delivered_at"),
)


#: custom roles (built-in roles live in the code)
custom_roles = Table(
    "custom_roles",
    metadata,
    Column("role_id", String(26), primary_key=True),
    Column("name", String(40), nullable=False, unique=True),
    Column("priority", Integer, nullable=False),
    Column("permissions", Text, nullable=False),  # JSON list
    Column("description", Text, nullable=False),
    Column("created_by", String(26), nullable=True),
    Column("created_at", BigInteger, nullable=False),
)

#: a room's allow/deny rules for a permission, for a role or a participant
room_overrides = Table(
    "room_overrides",
    metadata,
    Column("override_id", String(26), primary_key=True),
    Column("room_id", String(26), ForeignKey("rooms.room_id", ondelete="CASCADE"), nullable=False),
    Column("target_type", String(16), nullable=False),  # role | participant
    Column("target", String(40), nullable=False),
    Column("permission", String(64), nullable=False),
    Column("effect", String(8), nullable=False),  # allow | deny
    Column("created_by", String(26), nullable=True),
    Column("created_at", BigInteger, nullable=False),
    UniqueConstraint("room_id", "target_type", "target", "permission"),
)

#: language models behind the proxy, added with POST /api/models (models set at
#: start-up live in the settings, not here)
llm_models = Table(
    "models",
    metadata,
    Column("name", String(100), primary_key=True),
    Column("base_url", Text, nullable=False),
    Column("upstream_model", Text, nullable=True),
    # the upstream API key, encrypted with a key derived from the node secret
    Column("api_key", Text, nullable=True),
    Column("created_by", String(26), nullable=True),
    Column("created_at", BigInteger, nullable=False),
)

#: proxy usage per participant and model
model_usage = Table(
    "model_usage",
    metadata,
    Column(
        "participant_id",
        String(26),
        ForeignKey("participants.participant_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("model", String(100), primary_key=True),
    Column("requests", BigInteger, nullable=False),
    Column("errors", BigInteger, nullable=False),
    Column("prompt_tokens", BigInteger, nullable=False),
    Column("completion_tokens", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
)

#: who may use a model (decision 0053): a stored choice wins over the settings
model_access = Table(
    "model_access",
    metadata,
    Column("name", String(100), primary_key=True),
    #: the lowest role that may use the model (by priority)
    Column("min_role", String(64), nullable=True),
    #: whether guests (anonymous, role spectator) may use it
    Column("guests", Boolean, nullable=True),
    Column("updated_at", BigInteger, nullable=False),
)

#: model budgets per role or participant (decision 0053); a null field inherits
model_budgets = Table(
    "model_budgets",
    metadata,
    #: ``role`` or ``participant``
    Column("scope", String(16), primary_key=True),
    #: a role name or a participant id
    Column("subject", String(64), primary_key=True),
    Column("requests_per_minute", BigInteger, nullable=True),
    Column("tokens_per_day", BigInteger, nullable=True),
    Column("updated_at", BigInteger, nullable=False),
)

#: tokens spent per participant and UTC day (all models), for daily budgets
model_usage_daily = Table(
    "model_usage_daily",
    metadata,
    Column(
        "participant_id",
        String(26),
        ForeignKey("participants.participant_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    #: days since the Unix epoch (UTC)
    Column("day", Integer, primary_key=True),
    Column("requests", BigInteger, nullable=False),
    Column("tokens", BigInteger, nullable=False),
)

#: a participant's DID (did:key, Ed25519) and, if it stored one, its private key
#: encrypted on the client (opaque to the node)
identity_keys = Table(
    "identity_keys",
    metadata,
    Column(
        "participant_id",
        String(26),
        ForeignKey("participants.participant_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("did", String(128), nullable=False, unique=True),
    Column("encrypted_key", Text, nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
)

#: the zero-knowledge vault: blobs encrypted on the client, never read by the node
vault_entries = Table(
    "vault_entries",
    metadata,
    Column("entry_id", String(26), primary_key=True),
    Column(
        "participant_id",
        String(26),
        ForeignKey("participants.participant_id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("label", String(100), nullable=False),
    Column("provider", String(64), nullable=True),
    Column("blob", Text, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Index("ix_vault_entries_participant_id", "participant_id"),
)

# rate limits an admin changed at run time (JSON, see services/admin.py); NULL: none
mesh_config.append_column(Column("rate_limits", Text, nullable=True))
# whether this node is a registry, as the owner switched it (migration
# 0023_registry); NULL: as MESH_REGISTRY_ENABLED says
mesh_config.append_column(Column("registry_enabled", Boolean, nullable=True))
# whether the node fetches link previews, as the owner switched them
# (migration 0032_link_preview_switch); NULL: as MESH_LINK_PREVIEWS says
mesh_config.append_column(Column("link_previews", Boolean, nullable=True))

#: apps (HTML/CSS/JS) of the app store; the source lives in ``app_versions``
apps = Table(
    "apps",
    metadata,
    Column("app_id", String(26), primary_key=True),
    Column(
        "owner_id",
        String(26),
        ForeignKey("participants.participant_id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("name", String(100), nullable=False),
    Column("description", Text, nullable=False),
    #: the current version (the newest row of ``app_versions``)
    Column("version", Integer, nullable=False),
    Column("deployed", Boolean, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    Index("ix_apps_owner_id", "owner_id"),
    Index("ix_apps_deployed", "deployed"),
)

#: every stored version of an app's source (the oldest are pruned past a limit)
app_versions = Table(
    "app_versions",
    metadata,
    Column("app_id", String(26), ForeignKey("apps.app_id", ondelete="CASCADE"), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("html", Text, nullable=False),
    Column("css", Text, nullable=False),
    Column("js", Text, nullable=False),
    #: UTF-8 bytes of html + css + js
    Column("size", Integer, nullable=False),
    Column("created_by", String(26), nullable=True),
    Column("created_at", BigInteger, nullable=False),
)

#: uploaded files (``POST /api/upload``); the bytes live in ``<data_dir>/uploads/<stored_name>``
uploads = Table(
    "uploads",
    metadata,
    Column("upload_id", String(26), primary_key=True),
    #: the server-chosen file name: the lower-cased id and an extension of the detected type
    Column("stored_name", String(40), nullable=False, unique=True),
    #: the client's file name, sanitized; metadata only, never a path
    Column("filename", String(255), nullable=False),
    #: the detected type, ``application/octet-stream`` for anything a browser
    #: could run (decision 0056); served by ``services.uploads.serving``
    Column("content_type", String(100), nullable=False),
    Column("size", BigInteger, nullable=False),
    # no foreign key: uploads outlive their uploader (messages may still show them)
    Column("uploader_id", String(26), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Index("ix_uploads_uploader_id", "uploader_id"),
)

#: the uploads a message carries, in order (deleting a message keeps the uploads)
message_attachments = Table(
    "message_attachments",
    metadata,
    Column(
        "message_id",
        String(26),
        ForeignKey("messages.message_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("position", Integer, primary_key=True),
    Column("upload_id", String(26), ForeignKey("uploads.upload_id"), nullable=False),
    Index("ix_message_attachments_upload_id", "upload_id"),
)

#: mesh connections with other nodes (``docs/federation.md``); one row per peer
#: node (its DID); both nodes keep the same ``connection_id``
connections = Table(
    "connections",
    metadata,
    Column("connection_id", String(26), primary_key=True),
    Column("peer_did", String(128), nullable=False, unique=True),
    Column("peer_name", String(200), nullable=False),
    #: the peer's base URL (no trailing slash)
    Column("peer_url", String(2048), nullable=False),
    #: ``outbound`` (this node asked) or ``inbound`` (the peer asked)
    Column("direction", String(10), nullable=False),
    #: ``pending``, ``accepted``, ``declined`` or ``disconnected``
    Column("status", String(20), nullable=False),
    Column("message", Text, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    #: the last ``relay_outbox.seq`` the peer acknowledged
    Column("relay_cursor", BigInteger, nullable=False, server_default="0"),
    #: the last of the peer's own outbox positions applied here (relays at or
    #: below it are recognized as already applied)
    Column("relay_applied", BigInteger, nullable=False, server_default="0"),
    #: the client address an inbound request came from, as per-address limits
    #: count it (``services.ratelimit.address_key``: an IPv6 address by its
    #: /64; ``unknown`` when not known); pending ones are limited per
    #: address. NULL for outbound rows
    Column("request_address", String(64), nullable=True),
    Index("ix_connections_status", "status"),
)

#: rooms relayed over a connection: ``out`` (a room of this node, shared with the
#: peer) or ``in`` (the peer's room, mirrored here as a local room)
shared_rooms = Table(
    "shared_rooms",
    metadata,
    Column(
        "room_id",
        String(26),
        ForeignKey("rooms.room_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("connection_id", String(26), primary_key=True),
    #: the room's id on its home node (``room_id`` itself for ``out``)
    Column("home_room_id", String(26), nullable=False),
    Column("direction", String(3), nullable=False),
    #: the outbox head when it was shared: only later events go to the peer
    Column("from_seq", BigInteger, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    UniqueConstraint("connection_id", "home_room_id"),
)

#: participants of other nodes, as this node knows them (one local participant
#: per introducing node, home node and id on that node)
remote_participants = Table(
    "remote_participants",
    metadata,
    Column(
        "participant_id",
        String(26),
        ForeignKey("participants.participant_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    #: the connection it was first relayed over
    Column("connection_id", String(26), nullable=False),
    Column("node_did", String(128), nullable=False),
    Column("node_name", String(200), nullable=False),
    Column("remote_id", String(26), nullable=False),
    Column("remote_name", String(200), nullable=False),
    #: the DID of the node that relayed it here (its home node, or a hub
    #: relaying a third node's participant): only that node speaks as it, and
    #: each node's are its own (decision 0058)
    Column("introduced_by", String(128), nullable=False),
    UniqueConstraint("introduced_by", "node_did", "remote_id"),
)

#: events of shared rooms waiting for the peers' link tasks (written in the
#: same transaction as the change itself; deleted once every peer that needs one has it)
relay_outbox = Table(
    "relay_outbox",
    metadata,
    Column("seq", Seq, primary_key=True, autoincrement=True),
    Column("room_id", String(26), nullable=False),
    #: ``message``, ``edit``, ``delete`` or ``reaction``
    Column("kind", String(16), nullable=False),
    Column("body", Text, nullable=False),
    #: the connection the event arrived over (it is not sent back there); NULL: local
    Column("via_connection", String(26), nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Index("ix_relay_outbox_room_id", "room_id"),
    sqlite_autoincrement=True,
)

#: as a registry: meshes that announced themselves (``POST /api/meshes/heartbeat``),
#: one row per node DID; listed while ``last_seen`` is within ``registry_ttl``
registry_entries = Table(
    "registry_entries",
    metadata,
    Column("did", String(128), primary_key=True),
    Column("name", String(200), nullable=False),
    Column("description", Text, nullable=False),
    #: the mesh's public base URL (no trailing slash)
    Column("url", String(2048), nullable=False),
    #: humans and bots, as the mesh reported them
    Column("members", BigInteger, nullable=False),
    Column("bots", BigInteger, nullable=False),
    Column("version", String(64), nullable=False),
    #: unix milliseconds of the last heartbeat
    Column("last_seen", BigInteger, nullable=False),
    Index("ix_registry_entries_last_seen", "last_seen"),
)

# tokens signed out before they expire (``POST /api/auth/logout``); rows go
# once the token would have expired anyway
revoked_tokens = Table(
    "revoked_tokens",
    metadata,
    Column("token_id", String(64), primary_key=True),
    Column("participant_id", String(26), nullable=False),
    Column("expires_at", BigInteger, nullable=False),
    Index("ix_revoked_tokens_expires_at", "expires_at"),
)

# --- several processes on one PostgreSQL database (docs/decisions/0034-cluster.md) ---

#: the cluster's event stream: what each write transaction published, at
#: its block (``position``, ``blocks.py``; message and outbox positions of
#: the transaction are in the same block); every process applies it in
#: block order, up to where every block is final. Carried to the other
#: processes in notifications, read here to fill a gap. Written on
#: PostgreSQL only; rows go after a few minutes.
cluster_stream = Table(
    "cluster_stream",
    metadata,
    Column("position", Seq, primary_key=True, autoincrement=True),
    #: the process that wrote it (``Cluster.process_id``)
    Column("origin", String(40), nullable=False),
    #: the entries of one unit of work, as JSON (``store/outbox.py``)
    Column("body", Text, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Index("ix_cluster_stream_created_at", "created_at"),
)

#: the node processes serving this database, each beating every few seconds;
#: one that stops beating is dead and its sessions go offline
cluster_processes = Table(
    "cluster_processes",
    metadata,
    Column("process_id", String(40), primary_key=True),
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("started_at", BigInteger, nullable=False),
    Column("beat_at", BigInteger, nullable=False),
)

#: who holds sessions where: a participant is online while any live process
#: has a row for it
presence_sessions = Table(
    "presence_sessions",
    metadata,
    Column("process_id", String(40), primary_key=True),
    Column("participant_id", String(26), primary_key=True),
    Column("sessions", Integer, nullable=False),
    Index("ix_presence_sessions_participant_id", "participant_id"),
)

# --- shared security state (migration 0018) ---

#: rate-limit buckets every process shares (docs/decisions/0036): one GCRA
#: number per (rule, key), the wall-clock millisecond at which the bucket is
#: full again; a row whose ``full_at`` has passed means a full bucket and
#: may go. ``allowed`` says what the last hit was told. PostgreSQL only.
rate_counters = Table(
    "rate_counters",
    metadata,
    Column("rule", String(40), primary_key=True),
    Column("key", String(255), primary_key=True),
    Column("full_at", BigInteger, nullable=False),
    Column("allowed", Boolean, nullable=False),
    Index("ix_rate_counters_full_at", "full_at"),
)

#: DID login challenges (decision 0020), single-use: the first attempt sets
#: ``used``; kept one TTL past expiry to tell used and expired ones apart
did_challenges = Table(
    "did_challenges",
    metadata,
    Column("challenge", String(255), primary_key=True),
    Column("did", String(255), nullable=False),
    Column("expires_at", BigInteger, nullable=False),
    Column("used", Boolean, nullable=False),
    Index("ix_did_challenges_expires_at", "expires_at"),
)

#: nonces of signed node-to-node requests (decision 0027): a second insert
#: of one (did, nonce) is a replay; rows go once their timestamp has left
#: the skew window
federation_nonces = Table(
    "federation_nonces",
    metadata,
    Column("did", String(255), primary_key=True),
    Column("nonce", String(128), primary_key=True),
    Column("expires_at", BigInteger, nullable=False),
    Index("ix_federation_nonces_expires_at", "expires_at"),
)

# --- elected singletons (migration 0019) ---

#: managed bots as the process running the bot supervisor (an elected
#: singleton, ``store/leases.py``) last reported them, for every process's
#: ``GET /api/agents``; and a spawn's API key sealed with the node secret
#: (PostgreSQL only: the process that runs the bot may not be the one that
#: took the spawn; on SQLite the key stays in memory)
managed_bots = Table(
    "managed_bots",
    metadata,
    Column(
        "agent_id",
        String(26),
        ForeignKey("participants.participant_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("status", String(20), nullable=False),
    Column("restarts", Integer, nullable=False),
    Column("detail", Text, nullable=True),
    Column("sealed_key", Text, nullable=True),
    Column("updated_at", BigInteger, nullable=False),
)

# --- operator chores (migration 0020) ---

#: every token the node issued that has not expired yet, so an operator can
#: list a participant's tokens and revoke them (tokens stay stateless JWTs:
#: this is not consulted when a token is checked); expired rows are pruned
issued_tokens = Table(
    "issued_tokens",
    metadata,
    Column("token_id", String(64), primary_key=True),
    Column(
        "participant_id",
        String(26),
        ForeignKey("participants.participant_id", ondelete="CASCADE"),
        nullable=False,
    ),
    # how it was issued: setup, register, login, guest, bot, did, managed
    Column("kind", String(16), nullable=False),
    Column("issued_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
    # the User-Agent of the request that signed it in, and when it was last
    # used (unix seconds, written at most once a ``last_seen_interval``);
    # NULL: not known (migration 0030)
    Column("user_agent", String(300), nullable=True),
    Column("last_used_at", BigInteger, nullable=True),
    Index("ix_issued_tokens_participant_id", "participant_id"),
    Index("ix_issued_tokens_expires_at", "expires_at"),
)

# --- tasks (migration 0028) ---

#: work asked of an agent in a room (``services/tasks.py``, decision 0063);
#: ``message_id`` is the request, the root of the task's thread, and
#: ``request_seq`` its cursor; no foreign keys to participants (a task
#: outlives its agent or creator, as a message outlives its sender)
tasks = Table(
    "tasks",
    metadata,
    Column("task_id", String(26), primary_key=True),
    Column(
        "room_id",
        String(26),
        ForeignKey("rooms.room_id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("agent_id", String(26), nullable=False),
    Column("creator_id", String(26), nullable=False),
    Column("title", String(200), nullable=False),
    # submitted | working | input-required | completed | failed | canceled | rejected
    Column("state", String(20), nullable=False),
    Column("message_id", String(26), nullable=False),
    Column("request_seq", Seq, nullable=False),
    Column("context_id", String(64), nullable=False),
    Column("status_message", Text, nullable=True),
    # the result the agent gave (PATCH); NULL when a reply gave it
    Column("result", Text, nullable=True),
    # the agent updated it itself: its replies no longer complete it
    Column("managed", Boolean, nullable=False),
    # rest | ws | mcp | a2a
    Column("via", String(8), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    # the reply that completed it (the reconciliation): the result is that
    # message's text as it is now (an edit shows, a delete clears it)
    Column("result_message_id", String(26), nullable=True),
    Index("ix_tasks_room_id_task_id", "room_id", "task_id"),
    Index("ix_tasks_agent_id_state", "agent_id", "state"),
    Index("ix_tasks_creator_id", "creator_id"),
    Index("ix_tasks_context_id", "context_id"),
)

# a row per process: each readiness check that finds the last probe a second
# old writes its process's row, to learn that the store still accepts writes
# (store/health.py); rows of processes gone a day are pruned
health_probe = Table(
    "health_probe",
    metadata,
    # a row per serving process (``Node.process_id``), written by its readiness probe
    Column("process_id", String(26), primary_key=True),
    Column("probed_at", BigInteger, nullable=False),
)
