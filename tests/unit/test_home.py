"""``CATALOG_HOME`` is checked for writing by every process that uses it (``Settings.ensure_home``):
``catalog serve`` and a command, or two hosts on one home, start at once."""

from __future__ import annotations

import threading
from pathlib import Path

from catalog.settings import Settings


def test_a_probe_of_another_process_in_the_home_is_left_alone(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    # Another process's probe, between its write and its unlink (the one name every process used
    # to write and remove: two at once made one fail with "No such file or directory").
    theirs = home / ".write-probe"
    theirs.write_text("")
    assert Settings(home=home).ensure_home() == home
    assert theirs.exists()
    assert sorted(p.name for p in home.iterdir()) == [".write-probe"]  # ours is gone again


def test_many_processes_checking_one_home_at_once_all_find_it_writable(tmp_path: Path) -> None:
    home = tmp_path / "home"
    settings = Settings(home=home)
    failures: list[BaseException] = []
    start = threading.Barrier(16)

    def check() -> None:
        start.wait()
        for _ in range(200):
            try:
                settings.ensure_home()
            except Exception as exc:
                failures.append(exc)
                return

    threads = [threading.Thread(target=check) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert list(home.iterdir()) == []
