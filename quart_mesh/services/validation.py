"""Checks on domain values, shared by every transport.

Transports check JSON *types*; these check *values* (lengths, shapes,
characters) so that REST, WebSocket and bots are held to the same rules.
"""

from __future__ import annotations

import re
import unicodedata

import httpx

from ..config import Limits
from ..errors import BadRequest, Conflict, PayloadTooLarge
from ..ids import is_ulid
from ..names import normalize

__all__ = [
    "check_client_id",
    "check_content",
    "check_description",
    "check_display_name",
    "check_emoji",
    "check_id",
    "check_name",
    "check_password",
    "check_room_name",
    "cursor_number",
    "is_client_id",
    "is_resolvable_url",
    "name_refused",
]

_NAME_RE = re.compile(r"\w[\w.-]*")
# bidirectional embeddings, overrides and isolates: they reorder what follows
# them, so a room name could show as another's
#: what a display name may not hold (Unicode general categories)
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")
_CLIENT_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_COMMON_PASSWORDS = frozenset(
    {
        "password",
        "password1",
        "password123",
        "passw0rd",
        "12345678",
        "123456789",
        "1234567890",
        "11111111",
        "00000000",
        "qwertyui",
        "qwerty123",
        "qwertyuiop",
        "iloveyou",
        "letmein1",
        "abc12345",
        "abcdefgh",
        "sunshine",
        "princess",
        "football",
        "baseball",
        "welcome1",
        "admin123",
        "changeme",
        "trustno1",
    }
)


def check_name(name: str, limits: Limits) -> str:
    """A participant name: 1..max chars of letters, digits, ``_``, ``.``, ``-``.

    ``@`` is excluded: ``name@peer`` is how federated participants are shown,
    and ``@name`` is a mention.

    Returns:
        The name in NFKC (a fullwidth ``owner`` is ``owner``): what is stored, so callers
        use the returned value. That it does not look like an existing name
        is the store's check (``name_confusable``, decision 0056).
    """
    name = normalize(name)
    if not name or not name.strip():
        raise BadRequest("name must not be empty", "invalid_name")
    if len(name) > limits.max_name_chars:
        raise BadRequest(f"name must be at most {limits.max_name_chars} characters", "invalid_name")
    if not _NAME_RE.fullmatch(name):
        raise BadRequest(
            "name may contain only letters, digits, '_', '.' and '-', "
            "and must start with a letter, digit or '_'",
            "invalid_name",
        )
    return name


def check_password(password: str, name: str, limits: Limits) -> str:
    if len(password) < limits.min_password_chars:
        raise BadRequest(
            f"password must be at least {limits.min_password_chars} characters",
            "weak_password",
        )
    if len(password) > limits.max_password_chars:
        raise BadRequest(
            f"password must be at most {limits.max_password_chars} characters",
            "invalid_password",
        )
    folded = password.casefold()
    if folded in _COMMON_PASSWORDS or folded == name.casefold() or len(set(password)) < 3:
        raise BadRequest("password is too easy to guess", "weak_password")
    return password


def check_room_name(name: str, limits: Limits) -> str:
    """A room name: trimmed, 1..max characters, no control characters.

    Returns:
        The trimmed name in NFKC, as :func:`check_name`.
    """
    name = normalize(name).strip()
    if not name:
        raise BadRequest("name must not be empty", "invalid_name")
    if len(name) > limits.max_room_name_chars:
        raise BadRequest(
            f"name must be at most {limits.max_room_name_chars} characters", "invalid_name"
        )
    if any(ord(ch) < 32 for ch in name) or _BIDI_CONTROLS.search(name):
        raise BadRequest("name must not contain control characters", "invalid_name")
    return name


def check_display_name(display_name: str | None, limits: Limits) -> str | None:
    """A display name (shown beside the unique name, issue 32): in NFKC,
    trimmed, at most ``max_name_chars`` characters; spaces are allowed but
    control characters, line breaks and bidirectional controls are not.
    Not unique: the unique name is always shown beside it.

    Returns:
        The display name to store, or None (none, or only spaces: cleared).
    """
    if display_name is None:
        return None
    display_name = normalize(display_name).strip()
    if not display_name:
        return None
    if len(display_name) > limits.max_name_chars:
        raise BadRequest(
            f"displayName must be at most {limits.max_name_chars} characters",
            "invalid_display_name",
        )
    # controls, line breaks and every format character (zero-width spaces,
    # bidi marks, BOM, soft hyphen...) but the joiner of emoji sequences
    if (
        any(
            unicodedata.category(ch) in _INVISIBLE_CATEGORIES and ch != "\u200d"
            for ch in display_name
        )
        or not display_name.replace("\u200d", "").strip()
    ):
        raise BadRequest(
            "displayName must not contain control characters or line breaks",
            "invalid_display_name",
        )
    return display_name


def name_refused(found: tuple[str, str]) -> Conflict:
    """The 409 for a name the store refused: *found* is what
    ``name_conflict``/``room_name_conflict`` (``store/``) answered."""
    code, other = found
    if code == "name_confusable":
        return Conflict(
            f"that name looks like the existing name {other!r} "
            "(the same letters, or letters of another script or width that look alike)",
            code,
        )
    if code == "room_name_taken":
        return Conflict("a room with that name exists", code)
    return Conflict("that name is taken", code)


def check_description(description: str, limits: Limits) -> str:
    if len(description) > limits.max_description_chars:
        raise BadRequest(
            f"description must be at most {limits.max_description_chars} characters",
            "invalid_description",
        )
    if "\x00" in description:
        raise BadRequest("description must not contain NUL characters", "invalid_description")
    return description


def check_content(content: str, limits: Limits) -> str:
    """Message content: non-blank, no NUL, at most ``max_message_bytes`` UTF-8 bytes.

    Raises:
        BadRequest: empty or blank content, or NUL characters.
        PayloadTooLarge: over the limit (413, code ``content_too_large``).
    """
    if not content.strip():
        raise BadRequest("content must not be empty", "empty_content")
    if "\x00" in content:
        raise BadRequest("content must not contain NUL characters", "invalid_content")
    try:
        size = len(content.encode("utf-8"))
    except UnicodeEncodeError:
        raise BadRequest("content is not valid Unicode text", "invalid_content") from None
    if size > limits.max_message_bytes:
        raise PayloadTooLarge(
            f"content is {size} bytes; the limit is {limits.max_message_bytes}",
            "content_too_large",
        )
    return content


def check_emoji(emoji: str, limits: Limits) -> str:
    if not emoji.strip() or len(emoji) > limits.max_emoji_chars:
        raise BadRequest(f"emoji must be 1 to {limits.max_emoji_chars} characters", "invalid_emoji")
    if any(ord(ch) < 32 for ch in emoji) or any(ch.isspace() for ch in emoji):
        raise BadRequest("emoji must not contain spaces or control characters", "invalid_emoji")
    return emoji


def cursor_number(value: object) -> int | None:
    """The message cursor *value* names (a decimal string or a whole number of
    at most 18 digits), or None if it is not one."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    text = str(value)
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        return None
    return int(text)


def check_id(value: str, field: str) -> str:
    if not is_ulid(value):
        raise BadRequest(f"{field} is not a valid id", "invalid_id")
    return value


def is_client_id(value: str) -> bool:
    """Whether *value* is a well-formed ``clientId``: 1-64 characters of ASCII
    letters, digits, ``.``, ``_``, ``:`` and ``-``."""
    return _CLIENT_ID_RE.fullmatch(value) is not None


def check_client_id(value: str) -> None:
    """A send's ``clientId`` (the sender's own id for it, for idempotent retries).

    Raises:
        BadRequest: not 1-64 characters of ``A-Z a-z 0-9 . _ : -`` (``invalid_client_id``).
    """
    if not is_client_id(value):
        raise BadRequest(
            "clientId must be 1 to 64 characters of letters, digits, '.', '_', ':' and '-'",
            "invalid_client_id",
        )


def is_resolvable_url(url: str) -> bool:
    """Whether *url* (http or https) has a host that can be looked up at all:
    a name whose every label IDNA can encode (1 to 63 characters, none
    empty), or an address. httpx and the resolver raise on any other, at
    every attempt, so such a URL is refused when it is registered."""
    try:
        host = httpx.URL(url).raw_host.decode("ascii")
        host.encode("idna")  # what the resolver does to a name (labels 1-63)
    except (ValueError, httpx.InvalidURL):  # UnicodeError is a ValueError
        return False
    return bool(host)
