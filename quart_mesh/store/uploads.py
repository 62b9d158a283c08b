"""Repository: uploaded files (their records; the bytes live in the uploads
folder, ``Settings.resolved_uploads_dir``, which every process of the mesh
shares). A row is written only once its file is in place, so a process that
finds the row, on any host, finds the file."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..records import Upload
from .schema import uploads as uploads_table

__all__ = [
    "bytes_used",
    "get_by_name",
    "get_many",
    "insert_upload",
    "upload_from_row",
    "uploads_table",
]


def upload_from_row(row: Any) -> Upload:
    return Upload(
        upload_id=row.upload_id,
        stored_name=row.stored_name,
        filename=row.filename,
        content_type=row.content_type,
        size=row.size,
        uploader_id=row.uploader_id,
        created_at=row.created_at,
    )


def insert_upload(conn: Connection, upload: Upload) -> None:
    conn.execute(
        uploads_table.insert().values(
            upload_id=upload.upload_id,
            stored_name=upload.stored_name,
            filename=upload.filename,
            content_type=upload.content_type,
            size=upload.size,
            uploader_id=upload.uploader_id,
            created_at=upload.created_at,
        )
    )


def get_by_name(conn: Connection, stored_name: str) -> Upload | None:
    row = conn.execute(
        sa.select(uploads_table).where(uploads_table.c.stored_name == stored_name)
    ).first()
    return None if row is None else upload_from_row(row)


def get_many(conn: Connection, upload_ids: Sequence[str]) -> dict[str, Upload]:
    """The uploads among *upload_ids* that exist, by id."""
    if not upload_ids:
        return {}
    rows = conn.execute(
        sa.select(uploads_table).where(uploads_table.c.upload_id.in_(list(upload_ids)))
    )
    return {row.upload_id: upload_from_row(row) for row in rows}


def bytes_used(conn: Connection, uploader_id: str) -> int:
    """Total size of the participant's uploads."""
    total: int = conn.execute(
        sa.select(sa.func.coalesce(sa.func.sum(uploads_table.c.size), 0)).where(
            uploads_table.c.uploader_id == uploader_id
        )
    ).scalar_one()
    return int(total)


def count_uploads(conn: Connection, uploader_id: str) -> int:
    """How many uploads the participant keeps."""
    query = (
        sa.select(sa.func.count())
        .select_from(uploads_table)
        .where(uploads_table.c.uploader_id == uploader_id)
    )
    return int(conn.execute(query).scalar_one())
