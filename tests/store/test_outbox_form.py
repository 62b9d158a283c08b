"""The stream's wire form of a message (``store/outbox.py``): written out
field by field for speed, it must say what ``dataclasses.asdict`` says, and
read back as the same message."""

from __future__ import annotations

import dataclasses
import json

import pytest

from quart_mesh.events import MessagePosted
from quart_mesh.records import Message, Reaction, Upload
from quart_mesh.store import outbox
from quart_mesh.store.database import _CHUNK_BYTES

pytestmark = pytest.mark.store_free


def _message() -> Message:
    return Message(
        seq=5_242_881,
        message_id="01M8JYS2BDKHFWBDYK64DS5JXF",
        room_id="01M8JYS289Q3GKCV2F0DVEKYVK",
        sender_id="01M8JYS289Q3GKCV2F0DVEKYVA",
        sender_name="alice",
        content='héllo \u2028 "quoted" \\ back',
        created_at=1_764_400_000_000,
        to_id="01M8JYS289Q3GKCV2F0DVEKYVB",
        thread_id="01M8JYS289Q3GKCV2F0DVEKYVC",
        edited_at=1_764_400_000_500,
        reactions=(Reaction("👍", ("a", "b")), Reaction("🎉", ("c",))),
        attachments=(Upload("u1", "s1.png", "cat.png", "image/png", 1234, "a", 1_764_400_000_000),),
        origin="did:web:example.org",
        client_id="c-1",
        time_replaced=True,
        thread_replies=3,
        last_reply_at=1_764_400_001_000,
    )


def test_a_message_is_written_as_asdict_would_and_read_back_the_same() -> None:
    message = _message()
    (text,) = outbox.encode_each([outbox.Publish(MessagePosted(message.room_id, message=message))])
    written = json.loads(text)
    assert written["e"]["message"] == json.loads(json.dumps(dataclasses.asdict(message)))
    (entry,) = outbox.decode("[" + text + "]")
    assert isinstance(entry, outbox.Publish)
    assert isinstance(entry.event, MessagePosted)
    assert entry.event.message == message


def test_a_messages_frame_travels_with_it_and_is_the_one_computed_here() -> None:
    """The writing process serializes the frame once; a process reading the
    entry delivers those bytes, the same as it would have made itself."""
    message = _message()
    (text,) = outbox.encode_each([outbox.Publish(MessagePosted(message.room_id, message=message))])
    written = json.loads(text)
    fresh = MessagePosted(message.room_id, message=message)
    assert written["f"] == fresh.frame
    # a frame that is not the record's would show: the decoder takes the one carried
    written["f"] = written["f"].replace('"alice"', '"carried"')
    (entry,) = outbox.decode(json.dumps([written]))
    assert isinstance(entry, outbox.Publish)
    assert entry.event.frame == written["f"]
    assert isinstance(entry.event, MessagePosted)
    assert entry.event.message == message


def test_a_row_of_an_older_or_newer_version_still_reads() -> None:
    """Without the frame (a row written before it travelled), or with one
    made by another release (which may shape frames otherwise), the frame
    is computed here; a field this version does not know is left out."""
    message = _message()
    (text,) = outbox.encode_each([outbox.Publish(MessagePosted(message.room_id, message=message))])
    fresh = MessagePosted(message.room_id, message=message).frame
    for change in ("no frame", "another release"):
        written = json.loads(text)
        if change == "no frame":
            del written["f"], written["v"]
        else:
            written["v"] = "0.0.1"
            written["f"] = written["f"].replace('"alice"', '"shaped otherwise"')
        written["e"]["message"]["added_later"] = 1
        (entry,) = outbox.decode(json.dumps([written]))
        assert isinstance(entry, outbox.Publish)
        assert isinstance(entry.event, MessagePosted)
        assert entry.event.message == message
        assert entry.event.frame == fresh, change


@pytest.mark.parametrize("unit", ['"q"\\', "é", "漢", "😀"])
def test_an_entry_fits_one_notification_with_or_without_its_frame(unit: str) -> None:
    """A frame over FRAME_CARRIED UTF-8 bytes does not travel (made where it
    is delivered); one up to it does, and its entry, which holds the text
    twice (once escaped twice), still fits one notification. (A message
    long enough that its entry alone passes a notification's size has its
    commit read from the table, carried frame or not.)"""
    for length in range(1, 2 * outbox.FRAME_CARRIED, 7):
        message = dataclasses.replace(_message(), content=unit * length)
        event = MessagePosted(message.room_id, message=message)
        (text,) = outbox.encode_each([outbox.Publish(event)])
        carried = json.loads(text).get("f")
        assert (carried is not None) == (len(event.frame.encode()) <= outbox.FRAME_CARRIED)
        if carried is not None:
            assert len(text.encode()) <= _CHUNK_BYTES, (unit, length)
        (entry,) = outbox.decode("[" + text + "]")
        assert isinstance(entry.event, MessagePosted)
        assert entry.event.frame == MessagePosted(message.room_id, message=message).frame


def test_a_message_without_reactions_or_attachments_reads_back_with_empty_tuples() -> None:
    bare = dataclasses.replace(_message(), reactions=(), attachments=())
    (text,) = outbox.encode_each([outbox.Publish(MessagePosted(bare.room_id, message=bare))])
    (entry,) = outbox.decode("[" + text + "]")
    assert isinstance(entry.event, MessagePosted)
    assert entry.event.message == bare
