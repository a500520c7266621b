"""The one error every layer raises for configuration that cannot work.

Apart from ``catalog.settings`` (which re-exports it) so the command line can name it without
importing pydantic: ``catalog --help`` loads neither the settings nor anything they need."""

from __future__ import annotations


class ConfigError(Exception):
    """Configuration that cannot work; the message is one line meant for an operator."""


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
