"""Persistence: schema, migrations, and one repository module per domain.

Repositories are plain synchronous functions taking a SQLAlchemy
``Connection``; services run them through :class:`Database` off the event
loop. Nothing in this package checks permissions.
"""

from .database import Database

__all__ = ["Database"]
