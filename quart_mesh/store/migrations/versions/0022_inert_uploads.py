"""Uploads can never be script: uploads recorded before as a type a browser
would run (JavaScript, HTML, SVG, XML) are recorded as
``application/octet-stream``, the type they are now served as; their stored
names keep their extensions (docs/decisions/0056-trusted-names-and-inert-uploads.md).

Serving decides from the stored name's extension as well, so a row this
missed is still served inert; this keeps what messages and the upload list
say about a file the same as what is served.

Revision ID: 0022_inert_uploads
Revises: 0021_names
Create Date: 2026-11-27
"""

from __future__ import annotations

from alembic import op

revision = "0022_inert_uploads"
down_revision = "0021_names"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "UPDATE uploads SET content_type = 'application/octet-stream'"
        " WHERE stored_name LIKE '%.js' OR stored_name LIKE '%.html'"
        " OR stored_name LIKE '%.svg' OR stored_name LIKE '%.xml'"
    )


def downgrade() -> None:
    # what each was recorded as before is not kept; octet-stream is served
    # inert by every version
    pass
