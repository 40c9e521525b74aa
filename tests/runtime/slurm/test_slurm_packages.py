"""Without Slurm's packages, `python -m dpsim cluster up` says what to install and fails."""

from __future__ import annotations

import pytest

from dpsim.runtime.slurm import cli, packages


def test_missing_packages_are_named_with_what_to_install(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(packages, "program",
                        lambda name: None if name in ("slurmd", "munged") else f"/usr/bin/{name}")
    monkeypatch.setattr(packages.platform, "system", lambda: "Linux")
    monkeypatch.setattr(packages.platform, "release", lambda: "6.1.0-debian")
    message = packages.available()
    assert message is not None
    assert "missing: slurmd, munged" in message
    assert "apt-get install slurmd munge" in message
    assert cli.main("up") == 1
    assert "apt-get install slurmd munge" in capsys.readouterr().err


def test_macos_is_told_to_use_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packages, "program", lambda name: None)
    monkeypatch.setattr(packages.platform, "system", lambda: "Darwin")
    message = packages.available()
    assert message is not None
    assert "macOS has no Slurm package" in message


def test_nothing_missing_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packages, "program", lambda name: f"/usr/bin/{name}")
    assert packages.available() is None
