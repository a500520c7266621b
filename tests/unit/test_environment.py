"""The quick reader of the environment (catalog/environment.py) answers only where the settings
model would read the same: every environment it vouches for, the model accepts with the same
values, and the URL's parts are what SQLAlchemy's asyncpg dialect hands to ``asyncpg.connect``.
Anything else it leaves to the model (None)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.engine import make_url

from catalog.environment import (
    ANY_VALUE,
    DEFAULT_STATEMENT_TIMEOUT_MS,
    PLAIN_DATABASE_URL,
    SETTINGS,
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


def test_the_quick_readers_setting_names_are_the_settings_models_fields() -> None:
    assert set(Settings.model_fields) == SETTINGS
    assert ANY_VALUE <= SETTINGS


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
        "postgresql://h/db?ssl=require",  # options: the dialect's to read
        "postgresql://[::1]:5432/db",  # an IPv6 host
        "postgresql://user:p@ss@h/db",  # '@' in a part, unescaped
        "postgresql://h1:5432,h2:5432/db",  # several hosts
        "postgres://h/db",  # SQLAlchemy's name is postgresql
        "mysql://h/db",
        "garbage",
        "",
    ],
)
def test_a_url_the_quick_reader_cannot_vouch_for_is_left_to_the_model(url: str) -> None:
    assert plain_database_url(url) is None
    assert quick_settings({"CATALOG_DATABASE_URL": url}) is None


@settings(max_examples=200)
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
    assert quick.database.connect_args() == sqlalchemy_connect_args(URL)
    if timeout is None:
        assert quick.statement_timeout_ms == DEFAULT_STATEMENT_TIMEOUT_MS == 15_000


@pytest.mark.parametrize(
    "environ",
    [
        {},  # the embedded database: started and migrated by the full command
        {"CATALOG_DATABASE_URL": ""},
        {"CATALOG_DATABASE_URL": URL, "CATALOG_DATABASE_POOLER": "pgbouncer"},
        # A valid value, but not the quick reader's to judge.
        {"CATALOG_DATABASE_URL": URL, "CATALOG_POOL_SIZE": "30"},
        {"CATALOG_DATABASE_URL": URL, "CATALOG_POOL_SIZE": "abc"},
        {"CATALOG_DATABASE_URL": URL, "CATALOG_STATEMENT_TIMEOUT_MS": " 5"},
        {"CATALOG_DATABASE_URL": URL, "CATALOG_STATEMENT_TIMEOUT_MS": "007"},
        {"CATALOG_DATABASE_URL": URL, "CATALOG_STATEMENT_TIMEOUT_MS": "-1"},
        {"catalog_database_url": URL},  # the model reads names in any case
        {"CATALOG_DATABASE_URL": URL, "Catalog_Database_Url": "mysql://h/db"},
    ],
)
def test_an_environment_the_quick_reader_cannot_vouch_for_is_left_to_the_model(
    environ: dict[str, str],
) -> None:
    assert quick_settings(environ) is None


def test_the_model_still_names_a_bad_setting_the_quick_reader_left_to_it() -> None:
    with pytest.raises(ConfigError, match=r"^CATALOG_POOL_SIZE: Input should be a valid integer"):
        model({"CATALOG_DATABASE_URL": URL, "CATALOG_POOL_SIZE": "abc"})
