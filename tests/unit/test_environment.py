"""The quick reader of the environment (catalog/environment.py) answers only where the settings
model would read the same: every environment it vouches for, the model accepts with the same
values, its bounds and choices are the model's, and the URL's parts (the embedded server's too) are
what SQLAlchemy's asyncpg dialect hands to ``asyncpg.connect``. Anything else it leaves to the
model (None), which names what it refuses."""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Mapping
from pathlib import Path

import annotated_types
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.engine import make_url

from catalog.db import embedded_address
from catalog.db.embedded import EmbeddedPostgres
from catalog.environment import (
    ANY_VALUE,
    CHECKED,
    DATABASE_URLS,
    DEFAULT_STATEMENT_TIMEOUT_MS,
    PLAIN_DATABASE_URL,
    SETTINGS,
    Choice,
    Number,
    plain_database_url,
    quick_settings,
)
from catalog.settings import ConfigError, Settings, get_settings

URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/db"
# What an environment variable can hold (no NUL; no lone surrogates, which os.environ cannot carry).
ENV_TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=40)


def model(environ: Mapping[str, str]) -> Settings:
    """The settings model's reading of exactly ``environ`` (no other CATALOG_ variable)."""
    with pytest.MonkeyPatch.context() as patch:
        for key in os.environ:
            if key.upper().startswith("CATALOG_"):
                patch.delenv(key)
        for key, value in environ.items():
            patch.setenv(key, value)
        get_settings.cache_clear()
        try:
            return get_settings()
        finally:
            get_settings.cache_clear()


def sqlalchemy_connect_args(url: str) -> dict[str, object]:
    """What the engine's dialect passes to ``asyncpg.connect`` for ``url`` (catalog.db.engine)."""
    _, options = asyncpg_dialect().create_connect_args(make_url(url).set(drivername="postgresql+asyncpg"))
    return dict(options)


def accepted(environ: Mapping[str, str]) -> Settings | None:
    """The model's reading of ``environ``; None when it refuses it."""
    try:
        return model(environ)
    except ConfigError:
        return None


NUMBERS = {name: check for name, check in CHECKED.items() if isinstance(check, Number)}
CHOICES = {name: check for name, check in CHECKED.items() if isinstance(check, Choice)}
# Values of the model's choices the quick reader leaves to it, and why: a bare connection cannot
# go through a transaction pooler (its prepared statements).
LEFT_TO_THE_MODEL = {"database_pooler": {"pgbouncer"}}


def test_the_quick_readers_setting_names_are_the_settings_models_fields() -> None:
    assert set(Settings.model_fields) == SETTINGS
    kinds = [ANY_VALUE, DATABASE_URLS, frozenset(CHECKED)]
    assert sum(len(kind) for kind in kinds) == len(SETTINGS)  # each setting read one way


@pytest.mark.parametrize("name", sorted(NUMBERS))
def test_a_numeric_settings_type_and_bounds_are_the_models(name: str) -> None:
    field = Settings.model_fields[name]
    bounds: dict[str, object] = {"gt": None, "ge": None, "le": None}
    for constraint in field.metadata:
        assert isinstance(constraint, annotated_types.Gt | annotated_types.Ge | annotated_types.Le), (
            constraint
        )
        bounds.update(
            {bound.name: getattr(constraint, bound.name) for bound in dataclasses.fields(constraint)}
        )
    check = NUMBERS[name]
    assert (field.annotation, check.gt, check.ge, check.le) == (check.kind, *bounds.values())


@pytest.mark.parametrize("name", sorted(CHOICES))
def test_a_choice_settings_values_are_the_models_own_or_its_default(name: str) -> None:
    field = Settings.model_fields[name]
    literals = {
        value for arg in typing.get_args(field.annotation) for value in typing.get_args(arg) or [arg]
    } - {type(None)}
    assert CHOICES[name].values - {""} == literals - LEFT_TO_THE_MODEL.get(name, set())
    default = field.get_default(call_default_factory=True)
    for value in CHOICES[name].values:
        read = getattr(model({f"CATALOG_{name.upper()}": value}), name)
        assert read == (value or default)


def plain_numbers(check: Number) -> st.SearchStrategy[str]:
    """Numbers written plainly, around the bounds and far beyond them."""
    edges = [bound for bound in (check.gt, check.ge, check.le) if bound is not None]
    near = st.sampled_from(edges or [0]).flatmap(
        lambda edge: st.integers(int(edge) - 2, int(edge) + 2) | st.floats(edge - 1, edge + 1)
    )
    anywhere = st.integers(-(10**12), 10**12) | st.floats(-1e9, 1e9, allow_nan=False)
    written = (near | anywhere).map(
        lambda number: str(round(number, 3)) if isinstance(number, float) else str(number)
    )
    return written.filter(lambda text: check.kind is float or "." not in text)


@settings(max_examples=400, deadline=None)
@given(data=st.data(), name=st.sampled_from(sorted(NUMBERS)), plain=st.booleans())
def test_a_number_the_quick_reader_accepts_the_model_reads_alike_and_a_plain_one_it_refuses_the_model_refuses(
    data: st.DataObject, name: str, plain: bool
) -> None:
    check = NUMBERS[name]
    value = data.draw(plain_numbers(check) if plain else ENV_TEXT)
    environ = {f"CATALOG_{name.upper()}": value, "CATALOG_DATABASE_URL": URL}
    read = accepted(environ)
    if check.accepts(value):
        assert quick_settings(environ) is not None
        assert read is not None and getattr(read, name) == check.kind(value)
    else:
        assert quick_settings(environ) is None
        if plain:  # out of bounds: the model refuses it too (and names it)
            assert read is None


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(sorted(CHOICES)),
    value=st.sampled_from(
        ["on", "off", "shadow", "json", "text", "admin", "open", "none", "pgbouncer", ""]
    ).flatmap(lambda word: st.sampled_from([word, word.upper(), f" {word}", f"{word} "]))
    | ENV_TEXT,
)
def test_a_choice_the_quick_reader_accepts_is_one_the_model_accepts(name: str, value: str) -> None:
    environ = {f"CATALOG_{name.upper()}": value, "CATALOG_DATABASE_URL": URL}
    quick = quick_settings(environ)
    assert (quick is not None) == CHOICES[name].accepts(value)
    if quick is not None:
        assert accepted(environ) is not None


@settings(max_examples=200)
@given(name=st.sampled_from(sorted(ANY_VALUE)), value=ENV_TEXT)
def test_every_value_of_a_setting_the_quick_reader_leaves_unjudged_is_one_the_model_accepts(
    name: str, value: str
) -> None:
    model({f"CATALOG_{name.upper()}": value})  # raises ConfigError on a refused value


@settings(max_examples=300)
@given(url=st.from_regex(PLAIN_DATABASE_URL, fullmatch=True))
@example(url="postgresql://u%40x:p%2Fw%3A@db.example-1.internal:6543/a%20b")
@example(url="postgresql://:secret@host")
@example(url="postgresql:///only-a-database")
@example(url="postgresql+psycopg://host:0/")
@example(url="postgresql://u@db:5432/app?ssl=verify-full")
@example(url="postgresql+asyncpg://postgres@/catalog_t_1?host=%2Ftmp%2Fcatalog-test-pg-x%2Frun")
@example(url="postgresql://u@:5433/app?host=/var/run/postgresql&ssl=disable")
def test_a_plain_database_url_reads_as_sqlalchemys_asyncpg_dialect_reads_it_and_the_model_accepts_it(
    url: str,
) -> None:
    plain = plain_database_url(url)
    assert plain is not None
    assert plain.connect_args() == sqlalchemy_connect_args(url)
    assert model({"CATALOG_DATABASE_URL": url}).database_url == url


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://h/db?sslmode=require",  # libpq's name, which asyncpg.connect refuses
        "postgresql://h/db?ssl=true",  # not one of asyncpg's modes as written
        "postgresql://h/db?ssl=require&ssl=disable",  # the dialect hands asyncpg a tuple
        "postgresql://h/db?port=5433",  # other options: the dialect's to read
        "postgresql://h/db?host=/tmp:5433",  # a socket directory's ':' is the dialect's port
        "postgresql://h/db?host=/a,/b",  # several socket directories
        "postgresql://h/db?host=tmp",  # not an absolute directory
        "postgresql://h/db?ssl=require&host=/tmp",  # options in another order: the dialect's
        "postgresql://[::1]:5432/db",  # an IPv6 host
        "postgresql://user:p@ss@h/db",  # '@' in a part, unescaped
        "postgresql://h1:5432,h2:5432/db",  # several hosts
        "postgres://h/db",  # SQLAlchemy's name is postgresql
        "mysql://h/db",
        "garbage",
    ],
)
def test_a_url_the_quick_reader_cannot_vouch_for_is_left_to_the_model(url: str) -> None:
    assert plain_database_url(url) is None
    for name in DATABASE_URLS:
        assert quick_settings({"CATALOG_DATABASE_URL": URL, f"CATALOG_{name.upper()}": url}) is None


@settings(max_examples=100, deadline=None)
@given(
    # A ',' may stand in a plain URL's part, but a list of them is split at each (as the model does).
    urls=st.lists(
        st.from_regex(PLAIN_DATABASE_URL, fullmatch=True).filter(lambda url: "," not in url), max_size=3
    ),
    blank=st.sampled_from(["", " "]),
)
def test_plain_listen_and_replica_urls_are_ones_the_model_accepts_as_written(
    urls: list[str], blank: str
) -> None:
    replicas = f",{blank}".join([*urls, blank])
    environ = {"CATALOG_DATABASE_URL": URL, "CATALOG_READ_DATABASE_URL": replicas}
    if urls:
        environ["CATALOG_LISTEN_DATABASE_URL"] = urls[0]
    assert quick_settings(environ) is not None
    read = model(environ)
    assert (read.read_database_url, read.listen_database_url) == (urls, urls[0] if urls else None)


@settings(max_examples=200, deadline=None)
@given(
    timeout=st.none() | st.from_regex(r"0|[1-9][0-9]{0,8}", fullmatch=True),
    free=st.dictionaries(st.sampled_from(sorted(ANY_VALUE)), ENV_TEXT, max_size=4),
    others=st.dictionaries(
        st.sampled_from(["TOKEN", "TEST_DATABASE_URL", "BENCH_MODE"]), ENV_TEXT, max_size=2
    ),
)
def test_an_environment_the_quick_reader_vouches_for_is_read_alike_by_the_model(
    timeout: str | None, free: dict[str, str], others: dict[str, str]
) -> None:
    environ = {f"CATALOG_{name.upper()}": value for name, value in (free | others).items()}
    environ["CATALOG_DATABASE_URL"] = URL
    environ["PATH"] = "/usr/bin"
    if timeout is not None:
        environ["CATALOG_STATEMENT_TIMEOUT_MS"] = timeout
    quick = quick_settings(environ)
    assert quick is not None
    settings_read = model(environ)
    assert quick.statement_timeout_ms == settings_read.statement_timeout_ms
    assert quick.database is not None and quick.database.connect_args() == sqlalchemy_connect_args(URL)
    if timeout is None:
        assert quick.statement_timeout_ms == DEFAULT_STATEMENT_TIMEOUT_MS == 15_000


@pytest.mark.parametrize(
    "environ",
    [
        {"CATALOG_DATABASE_URL": URL, "CATALOG_DATABASE_POOLER": "pgbouncer"},
        {"CATALOG_DATABASE_URL": URL, "CATALOG_POOL_SIZE": "abc"},
        {"CATALOG_DATABASE_URL": URL, "CATALOG_POOL_SIZE": "0"},  # refused by the model
        {"CATALOG_DATABASE_URL": URL, "CATALOG_POOL_SIZE": "1001"},
        {"CATALOG_DATABASE_URL": URL, "CATALOG_POOL_SIZE": "1_0"},  # valid, but not as plainly written
        {"CATALOG_DATABASE_URL": URL, "CATALOG_POOL_WAIT_SECONDS": "1e1"},
        {"CATALOG_DATABASE_URL": URL, "CATALOG_LOG_FORMAT": "JSON"},
        {"CATALOG_DATABASE_URL": URL, "CATALOG_MCP_FAST_PATH": "maybe"},
        {"CATALOG_DATABASE_URL": URL, "CATALOG_STATEMENT_TIMEOUT_MS": " 5"},
        {"CATALOG_DATABASE_URL": URL, "CATALOG_STATEMENT_TIMEOUT_MS": "007"},
        {"CATALOG_DATABASE_URL": URL, "CATALOG_STATEMENT_TIMEOUT_MS": "-1"},
        {"catalog_database_url": URL},  # the model reads names in any case
        {"CATALOG_DATABASE_URL": URL, "Catalog_Database_Url": "mysql://h/db"},
        {"catalog_home": "/elsewhere"},
    ],
)
def test_an_environment_the_quick_reader_cannot_vouch_for_is_left_to_the_model(
    environ: dict[str, str],
) -> None:
    assert quick_settings(environ) is None


def test_the_model_still_names_a_bad_setting_the_quick_reader_left_to_it() -> None:
    with pytest.raises(ConfigError, match=r"^CATALOG_POOL_SIZE: Input should be a valid integer"):
        model({"CATALOG_DATABASE_URL": URL, "CATALOG_POOL_SIZE": "abc"})


@settings(max_examples=200, deadline=None)
@given(home=st.none() | ENV_TEXT, url=st.sampled_from([None, ""]))
def test_without_a_database_url_the_quick_reader_names_the_models_home_for_the_embedded_server(
    home: str | None, url: str | None
) -> None:
    environ = {"CATALOG_HOME": home, "CATALOG_DATABASE_URL": url}
    environ = {key: value for key, value in environ.items() if value is not None}
    quick = quick_settings(environ)
    read = model(environ)
    assert quick is not None and quick.database is None and read.uses_embedded_database
    assert quick.home == read.home


def test_the_embedded_servers_connect_arguments_are_what_the_full_command_connects_with(
    tmp_path: Path,
) -> None:
    for home in (tmp_path / "home", tmp_path / ("long-" * 30)):  # the second: a socket under /tmp
        assert embedded_address.connect_args(home) == sqlalchemy_connect_args(EmbeddedPostgres(home).url())


def postmaster_pid(home: Path, socket_dir: Path, status: str) -> None:
    """A postmaster.pid as PostgreSQL writes it (pidfile.h: pid, data directory, start time, port,
    socket directory, listen address, shared memory key, status)."""
    (home / "pgdata").mkdir(parents=True, exist_ok=True)
    lines = ["4242", str(home / "pgdata"), "1765000000", "5432", str(socket_dir), "", "0 0", f"{status:<8}"]
    (home / "pgdata" / "postmaster.pid").write_text("\n".join(lines) + "\n")


def test_a_server_counts_as_serving_only_when_ready_on_its_homes_socket(tmp_path: Path) -> None:
    home = tmp_path / "home"
    socket_dir = embedded_address.socket_dir(home)
    assert not embedded_address.serving(home)  # nothing there
    socket_dir.mkdir(parents=True)
    (socket_dir / embedded_address.SOCKET_NAME).touch()
    postmaster_pid(home, socket_dir, "starting")
    assert not embedded_address.serving(home)
    postmaster_pid(home, tmp_path / "elsewhere", "ready")
    assert not embedded_address.serving(home)
    postmaster_pid(home, socket_dir, "ready")
    assert embedded_address.serving(home)
    (socket_dir / embedded_address.SOCKET_NAME).unlink()
    assert not embedded_address.serving(home)
