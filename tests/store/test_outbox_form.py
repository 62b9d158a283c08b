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


def test_a_long_messages_frame_is_made_where_it_is_delivered() -> None:
    """A frame longer than FRAME_CARRIED does not travel: the entry, which
    would hold the text twice (once escaped twice), stays small enough for
    a notification."""
    long = dataclasses.replace(_message(), content='"quoted"\n' * 400)
    (text,) = outbox.encode_each([outbox.Publish(MessagePosted(long.room_id, message=long))])
    written = json.loads(text)
    assert "f" not in written
    (entry,) = outbox.decode("[" + text + "]")
    assert isinstance(entry.event, MessagePosted)
    assert entry.event.frame == MessagePosted(long.room_id, message=long).frame
    assert len(MessagePosted(long.room_id, message=long).frame) > outbox.FRAME_CARRIED
    # a message with no reactions or attachments reads back with empty tuples
    bare = dataclasses.replace(_message(), reactions=(), attachments=())
    (text,) = outbox.encode_each([outbox.Publish(MessagePosted(bare.room_id, message=bare))])
    (entry,) = outbox.decode("[" + text + "]")
    assert isinstance(entry.event, MessagePosted)
    assert entry.event.message == bare
