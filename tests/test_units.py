"""Small units: ids, settings, JSON parsing, public exports."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from quart_mesh.config import Limits, ModelBudget, Settings
from quart_mesh.errors import BadRequest, ConfigError
from quart_mesh.ids import is_ulid, new_id
from quart_mesh.records import iso
from quart_mesh.wire import Fields, parse_json_object

# the same whatever the store: run once, on SQLite
pytestmark = pytest.mark.store_free


def test_ids_are_ulids_sorted_by_time() -> None:
    a, b = new_id(1_000), new_id(2_000)
    assert is_ulid(a)
    assert is_ulid(b)
    assert len(a) == 26
    assert a < b
    assert len({new_id() for _ in range(1000)}) == 1000
    assert not is_ulid("01arz3ndektsv4rrffq69g5fav")  # lower case
    assert not is_ulid("8ZZZZZZZZZZZZZZZZZZZZZZZZZ")  # overflows 128 bits
    assert not is_ulid("01ARZ3NDEKTSV4RRFFQ69G5FAI")  # I is not Crockford
    assert not is_ulid(None)


def test_iso_timestamps() -> None:
    assert iso(0) == "1970-01-01T00:00:00.000Z"
    assert iso(1_795_295_338_123) == "2026-11-21T21:08:58.123Z"
    assert iso(None) is None
    # as datetime renders them, from before 1970 to far ahead
    for ms in (
        -1,
        -86_400_001,
        1,
        999,
        1_000,
        951_782_400_000,
        4_102_444_799_999,
        253_402_300_799_999,
    ):
        expected = datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.")
        assert iso(ms) == expected + f"{ms % 1000:03d}Z", ms


@pytest.mark.sqlite_only  # the default database URL (the suite swaps it on PostgreSQL)
def test_settings_from_env(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {
            "MESH_DATA_DIR": str(tmp_path),
            "MESH_HOST": "0.0.0.0",
            "MESH_PORT": "9000",
            "MESH_PUBLIC_URL": "https://mesh.example/",
            "MESH_MAX_MESSAGE_BYTES": "100",
        }
    )
    assert settings.data_dir == tmp_path
    assert settings.host == "0.0.0.0"
    assert settings.port == 9000
    assert settings.public_url == "https://mesh.example"
    assert settings.limits.max_message_bytes == 100
    assert settings.limits.max_page_size == Limits().max_page_size
    assert settings.resolved_database_url == f"sqlite:///{(tmp_path / 'mesh.db').resolve()}"
    assert (
        Settings.from_env({"MESH_DATABASE_URL": "sqlite:///x.db"}).resolved_database_url
        == "sqlite:///x.db"
    )
    assert settings.with_overrides(port=1, host=None).port == 1


@pytest.mark.parametrize(
    "env",
    [
        {"MESH_PORT": "http"},
        {"MESH_PORT": "70000"},
        {"MESH_PUBLIC_URL": "mesh.example"},
        {"MESH_MAX_BODY_BYTES": "0"},
        {"MESH_MAX_BODY_BYTES": "lots"},
    ],
)
def test_settings_reject_bad_env(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        Settings.from_env(env)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{",
        b"[]",
        b"1",
        b'"x"',
        b"\xff",
        b'{"a": NaN}',
        b'{"a": Infinity}',
        b'{"a": "\\udc00"}',
        b"[" * 5000 + b"]" * 5000,
    ],
)
def test_parse_json_object_rejects(raw: bytes) -> None:
    with pytest.raises(BadRequest) as info:
        parse_json_object(raw)
    assert info.value.code == "invalid_json"


def test_fields_types() -> None:
    fields = Fields(parse_json_object(b'{"s": "x", "n": 1.5, "b": true, "z": null, "i": 3}'))
    assert fields.req_str("s") == "x"
    assert fields.opt_str("missing") is None
    assert fields.opt_str("z") is None
    assert fields.opt_bool("b") is True
    assert fields.opt_number("n") == 1.5
    assert fields.opt_number("i") == 3.0
    for call in (
        lambda: fields.req_str("n"),
        lambda: fields.req_str("z"),
        lambda: fields.opt_bool("s"),
        lambda: fields.opt_number("b"),
        lambda: fields.opt_number("s"),
    ):
        with pytest.raises(BadRequest):
            call()


@pytest.mark.parametrize(
    "env",
    [
        {"MESH_DEFAULT_PAGE_SIZE": "300"},
        {"MESH_MAX_MESSAGE_BYTES": "100000"},
        {"MESH_MAX_NAME_CHARS": "500"},
        {"MESH_MAX_EMOJI_CHARS": "65"},
        {"MESH_TOKEN_TTL_SECONDS": "-5"},
    ],
)
def test_settings_reject_inconsistent_limits(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        Settings.from_env(env)


def test_token_lifetimes_from_env() -> None:
    settings = Settings.from_env(
        {"MESH_TOKEN_TTL_SECONDS": "60", "MESH_GUEST_TOKEN_TTL_SECONDS": "30"}
    )
    assert (settings.token_ttl_seconds, settings.guest_token_ttl_seconds) == (60, 30)


def test_realtime_settings_from_env() -> None:
    settings = Settings.from_env(
        {
            "MESH_SUBSCRIBER_BUFFER": "64",
            "MESH_AUTH_TIMEOUT": "2.5",
            "MESH_MAX_FRAME_BYTES": "1024",
            "MESH_WS_SEND_TIMEOUT": "5",
            "MESH_MAX_REPLAY": "10",
            "MESH_MAX_POLL_TIMEOUT": "60",
            "MESH_GRACEFUL_TIMEOUT": "20",
        }
    )
    assert settings.subscriber_buffer == 64
    assert settings.auth_timeout == 2.5
    assert settings.max_frame_bytes == 1024
    assert settings.ws_send_timeout == 5.0
    assert settings.max_replay == 10
    assert settings.max_poll_timeout == 60.0
    assert settings.graceful_timeout == 20.0
    for bad in (
        {"MESH_AUTH_TIMEOUT": "soon"},
        {"MESH_AUTH_TIMEOUT": "0"},
        {"MESH_MAX_REPLAY": "-1"},
    ):
        with pytest.raises(ConfigError):
            Settings.from_env(bad)


def test_models_from_the_environment(tmp_path: Path) -> None:
    models_file = tmp_path / "models.json"
    models_file.write_text(
        '[{"name": "gpt", "baseUrl": "https://api.example/v1/", "apiKeyEnv": "GPT_KEY"}]'
    )
    settings = Settings.from_env(
        {
            "MESH_MODELS_FILE": str(models_file),
            "MESH_MODELS": '[{"name": "local", "baseUrl": "http://h:1/v1", "upstreamModel": "l3"}]',
            "GPT_KEY": "sk-from-env",
            "MESH_MODEL_TIMEOUT": "30",
        }
    )
    assert [(m.name, m.base_url, m.upstream_model, m.api_key) for m in settings.models] == [
        ("gpt", "https://api.example/v1", None, "sk-from-env"),
        ("local", "http://h:1/v1", "l3", None),
    ]
    assert settings.model_timeout == 30
    assert "sk-from-env" not in repr(settings)
    for bad in (
        "{}",
        "[1]",
        '[{"name": "x"}]',
        "not json",
        '[{"name": "x", "baseUrl": "u", "apiKeyEnv": "NOPE"}]',
    ):
        with pytest.raises(ConfigError):
            Settings.from_env({"MESH_MODELS": bad})


def test_model_access_and_budget_settings_from_env() -> None:
    """Who may use a model and the default budgets (decision 0053)."""
    settings = Settings.from_env(
        {
            "MESH_MODELS": '[{"name": "open", "baseUrl": "http://h:1/v1",'
            ' "minRole": "spectator", "guests": true}, {"name": "m", "baseUrl": "http://h:1/v1"}]',
            "MESH_MODEL_MIN_ROLE": "member",
            "MESH_MODEL_MAX_N": "1",
            "MESH_MODEL_MAX_TOKENS": "512",
            "MESH_MODEL_REQUESTS_PER_MINUTE": "0",
            "MESH_MODEL_TOKENS_PER_DAY": "5000",
        }
    )
    assert [(m.name, m.min_role, m.guests) for m in settings.models] == [
        ("open", "spectator", True),
        ("m", None, False),
    ]
    assert (settings.model_min_role, settings.model_max_n, settings.model_max_tokens) == (
        "member",
        1,
        512,
    )
    assert (settings.model_requests_per_minute, settings.model_tokens_per_day) == (0, 5000)
    defaults = Settings()
    assert (defaults.model_min_role, defaults.model_max_n, defaults.model_max_tokens) == (
        "agent",
        4,
        4096,
    )
    budgets = Settings.from_env(
        {"MESH_MODEL_ROLE_BUDGETS": '{"spectator": {"tokensPerDay": 2000}, "agent": {}}'}
    ).model_role_budgets
    assert dict(budgets) == {
        "spectator": ModelBudget(None, 2000),
        "agent": ModelBudget(None, None),
    }
    assert dict(defaults.model_role_budgets) == {}
    for env in (
        {"MESH_MODEL_ROLE_BUDGETS": "[]"},
        {"MESH_MODEL_ROLE_BUDGETS": '{"agent": {"tokensPerDay": -1}}'},
        {"MESH_MODEL_ROLE_BUDGETS": '{"agent": {"tokens": 5}}'},
        {"MESH_MODEL_ROLE_BUDGETS": '{"agent": 5}'},
        {"MESH_MODELS": '[{"name": "x", "baseUrl": "u", "guests": "yes"}]'},
        {"MESH_MODELS": '[{"name": "x", "baseUrl": "u", "minRole": 3}]'},
        {"MESH_MODEL_MAX_N": "0"},
        {"MESH_MODEL_TOKENS_PER_DAY": "-5"},
    ):
        with pytest.raises(ConfigError):
            Settings.from_env(env)


def test_a_forked_child_draws_other_ids() -> None:
    """Ids take the OS's randomness in blocks: a forked child must not reuse
    the block its parent holds (``quart-mesh serve --workers`` forks)."""
    import os

    new_id()  # the parent holds a block now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        os.close(read)
        os.write(write, ",".join(new_id(0) for _ in range(5)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read().split(",")
    os.waitpid(pid, 0)
    parent = [new_id(0) for _ in range(5)]
    assert not set(child) & set(parent)
