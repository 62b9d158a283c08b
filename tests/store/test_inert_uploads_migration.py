"""Migration 0022_inert_uploads: uploads recorded by earlier versions as a
type a browser would run are recorded as ``application/octet-stream``, the
type they are served as; others keep theirs (decision 0056)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from quart_mesh.store import Database
from quart_mesh.store.health import alembic_config

_UPLOAD = sa.text(
    "INSERT INTO uploads (upload_id, stored_name, filename, content_type, size,"
    " uploader_id, created_at) VALUES (:id, :stored, 'f', :ctype, 1, :id, 1)"
)
BEFORE = {
    "01CCCCCCCCCCCCCCCCCCCCCCC1": ("js", "text/javascript; charset=utf-8"),
    "01CCCCCCCCCCCCCCCCCCCCCCC2": ("html", "text/html; charset=utf-8"),
    "01CCCCCCCCCCCCCCCCCCCCCCC3": ("svg", "image/svg+xml"),
    "01CCCCCCCCCCCCCCCCCCCCCCC4": ("xml", "application/xml"),
    "01CCCCCCCCCCCCCCCCCCCCCCC5": ("png", "image/png"),
    "01CCCCCCCCCCCCCCCCCCCCCCC6": ("txt", "text/plain; charset=utf-8"),
    "01CCCCCCCCCCCCCCCCCCCCCCC7": ("pdf", "application/pdf"),
}


async def test_uploads_recorded_as_script_are_recorded_inert(store_url: str) -> None:
    engine = sa.create_engine(store_url)
    try:
        with engine.begin() as conn:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0021_names")
            for upload_id, (ext, ctype) in BEFORE.items():
                stored = f"{upload_id.lower()}.{ext}"
                conn.execute(_UPLOAD, {"id": upload_id, "stored": stored, "ctype": ctype})
    finally:
        engine.dispose()
    db = Database(store_url)
    await db.open()
    try:
        rows = await db.read(
            lambda conn: {
                r[0]: r[1]
                for r in conn.execute(sa.text("SELECT upload_id, content_type FROM uploads"))
            }
        )
    finally:
        await db.close()
    inert = "application/octet-stream"
    assert rows == {
        "01CCCCCCCCCCCCCCCCCCCCCCC1": inert,
        "01CCCCCCCCCCCCCCCCCCCCCCC2": inert,
        "01CCCCCCCCCCCCCCCCCCCCCCC3": inert,
        "01CCCCCCCCCCCCCCCCCCCCCCC4": inert,
        "01CCCCCCCCCCCCCCCCCCCCCCC5": "image/png",
        "01CCCCCCCCCCCCCCCCCCCCCCC6": "text/plain; charset=utf-8",
        "01CCCCCCCCCCCCCCCCCCCCCCC7": "application/pdf",
    }
