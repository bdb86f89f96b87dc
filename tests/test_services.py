"""The one rule for a missing service or tool: fail on CI, skip elsewhere. ``CI`` is read the
way CI runners set it, so a runner with ``CI=1`` cannot turn every service test into a skip."""

from __future__ import annotations

import pytest

from harness.services import on_ci, require


@pytest.mark.parametrize("value", ["true", "TRUE", "True", "1", "yes", "YES", "on", " true "])
def test_truthy_ci_values_mean_ci(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    assert on_ci()


@pytest.mark.parametrize("value", ["", "0", "false", "no", "off", "maybe"])
def test_other_ci_values_do_not(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    assert not on_ci()


def test_no_ci_variable_is_not_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    assert not on_ci()


def test_a_missing_service_fails_on_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="required on CI"):
        require(False, "the thing")


def test_a_missing_service_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="install it"):
        require(False, "the thing", hint="install it")


def test_an_available_service_passes_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    for value in ("1", ""):
        monkeypatch.setenv("CI", value)
        require(True, "the thing")
