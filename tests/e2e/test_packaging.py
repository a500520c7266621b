"""What ships: the Dockerfile's essentials (no Docker engine here) and settings handling."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from catalog.db.migrate import scripts_location
from catalog.settings import ConfigError, Settings, get_settings

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in lines]


def test_dockerfile_is_multi_stage_and_runs_as_a_non_root_user_under_an_init() -> None:
    instructions = dockerfile_instructions()
    stages = [args for op, args in instructions if op == "FROM"]
    assert len(stages) >= 2
    runtime = instructions[max(i for i, (op, _) in enumerate(instructions) if op == "FROM") :]
    users = [args for op, args in runtime if op == "USER"]
    assert users and users[-1] not in ("root", "0")
    entrypoint = next(args for op, args in runtime if op == "ENTRYPOINT")
    assert "tini" in entrypoint
    command = next(args for op, args in runtime if op == "CMD")
    assert re.search(r'"catalog",\s*"serve"', command)
    healthcheck = next(args for op, args in runtime if op == "HEALTHCHECK")
    assert "/healthz" in healthcheck
    copied = " ".join(args for op, args in instructions if op == "COPY")
    assert "migrations" in copied and "catalog" in copied


def test_migrations_ship_inside_the_package() -> None:
    location = scripts_location()
    assert (location / "env.py").is_file()
    assert any(location.joinpath("versions").glob("0001_*.py"))


def test_secrets_are_generated_once_and_kept_private(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    token, generated = settings.platform_admin_token()
    again, generated_again = Settings(home=tmp_path).platform_admin_token()
    key = settings.signing_key()
    assert token.startswith("cat_") and len(token) >= 40
    assert (again, generated, generated_again) == (token, True, False)
    assert Settings(home=tmp_path).signing_key() == key and len(key) >= 32
    for name in ("admin_token", "secret_key"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o600


def test_configured_secrets_win_over_kept_ones(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, admin_token="cat_given", secret_key="given-key")
    assert settings.platform_admin_token() == ("cat_given", False)
    assert settings.signing_key() == b"given-key"
    assert not (tmp_path / "admin_token").exists()


def test_host_and_origin_lists_read_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CATALOG_ALLOWED_HOSTS", "catalog.example.com, 10.0.0.5:8000")
    monkeypatch.setenv("CATALOG_ALLOWED_ORIGINS", "https://app.example.com")
    settings = Settings()
    assert settings.allowed_hosts == ["catalog.example.com", "10.0.0.5:8000"]
    assert settings.allowed_origins == ["https://app.example.com"]


def test_defaults_are_loopback_and_sixteen_mebibytes(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("CATALOG_"):
            monkeypatch.delenv(name)
    settings = Settings()
    assert settings.max_blob_bytes == 16 * 1024 * 1024
    assert settings.allowed_hosts == ["127.0.0.1", "localhost", "[::1]"]
    assert settings.database_url is None and settings.uses_embedded_database


def test_invalid_setting_is_one_line_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CATALOG_MAX_BLOB_BYTES", "lots")
    get_settings.cache_clear()
    try:
        with pytest.raises(ConfigError) as info:
            get_settings()
    finally:
        get_settings.cache_clear()
    assert str(info.value).startswith("CATALOG_MAX_BLOB_BYTES: ")
    assert "\n" not in str(info.value)


def test_the_image_keeps_its_data_directory_on_a_volume_and_runs_as_a_numeric_user() -> None:
    instructions = dockerfile_instructions()
    runtime = instructions[max(i for i, (op, _) in enumerate(instructions) if op == "FROM") :]
    env = " ".join(args for op, args in runtime if op == "ENV")
    home = re.search(r"CATALOG_HOME=(\S+)", env)
    assert home is not None
    volumes = [args for op, args in runtime if op == "VOLUME"]
    assert volumes and home.group(1) in volumes[-1]
    user = [args for op, args in runtime if op == "USER"][-1]
    assert re.fullmatch(r"[1-9][0-9]*(:[1-9][0-9]*)?", user), user


def constraints() -> dict[str, str]:
    from packaging.utils import canonicalize_name

    pinned = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pinned[canonicalize_name(name)] = version.strip()
    return pinned


def test_the_image_installs_from_the_constraints_file_and_it_pins_every_dependency() -> None:
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    instructions = dockerfile_instructions()
    build = instructions[: max(i for i, (op, _) in enumerate(instructions) if op == "FROM")]
    assert any(op == "ENV" and "PIP_CONSTRAINT=" in args for op, args in build)
    assert any(op == "COPY" and "constraints.txt" in args for op, args in build)

    pinned = constraints()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wanted = [Requirement(r) for r in project["project"]["dependencies"]]
    wanted += [Requirement(r) for r in project["build-system"]["requires"]]
    for requirement in wanted:
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement.name} is not pinned: run scripts/refresh-constraints.sh"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"{requirement.name}=={pinned[name]} is outside {requirement.specifier}: refresh the constraints"
        )


def test_the_console_and_docs_assets_ship_in_the_package() -> None:
    """Every file of the console and of the vendored docs is package data (no CDN, no build step):
    the wheel holds what /console, /docs and /redoc serve."""
    import fnmatch
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "catalog.console" in config["packages"]
    patterns = config["package-data"]["catalog.console"]
    base = ROOT / "catalog" / "console"
    files = [p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file() and p.suffix != ".py"]
    assert {"static/index.html", "static/app.js", "vendor/swagger-ui/swagger-ui-bundle.js"} <= set(files)
    assert "vendor/redoc/redoc.standalone.js" in files
    # setuptools' globs do not cross directories: match part by part.
    unshipped = [
        f
        for f in files
        if not any(
            len(f.split("/")) == len(p.split("/"))
            and all(fnmatch.fnmatch(a, b) for a, b in zip(f.split("/"), p.split("/"), strict=True))
            for p in patterns
        )
    ]
    assert unshipped == []


def test_the_built_wheel_holds_every_module_of_the_package_and_its_migrations(tmp_path: Path) -> None:
    """The wheel the image installs, built as `pip wheel` builds it: every module of `catalog/` and
    of `migrations/` is inside it, so a package added by a split cannot be left out of the list in
    pyproject.toml (five were once, and only an installed wheel showed it)."""
    import subprocess
    import sys
    import zipfile

    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--wheel-dir",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("catalog-*.whl")
    shipped = {name for name in zipfile.ZipFile(wheel).namelist() if name.endswith(".py")}
    sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "catalog").rglob("*.py")}
    sources |= {
        "catalog/migrations/" + p.relative_to(ROOT / "migrations").as_posix()
        for p in (ROOT / "migrations").rglob("*.py")
    }
    assert sorted(sources - shipped) == []
    assert "catalog/db/sql/functions.sql" in zipfile.ZipFile(wheel).namelist()
