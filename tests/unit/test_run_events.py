"""The run's events reach plugins through pluggy's own caller (order, tryfirst/trylast,
wrappers), and a plugin that raises is logged without stopping the others."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from rsdrill.engine.events import RunEvents
from rsdrill.hooks import hookimpl


def test_plugins_are_called_by_pluggy_and_a_failing_one_is_only_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[str] = []

    class Broken:
        @hookimpl
        def rsdrill_phase(self, name: str) -> None:
            calls.append(f"broken {name}")
            raise KeyError(name)

    class Last:
        @hookimpl(trylast=True)
        def rsdrill_phase(self, name: str) -> None:
            calls.append(f"last {name}")

    class First:
        @hookimpl(tryfirst=True)
        def rsdrill_phase(self, name: str) -> None:
            calls.append(f"first {name}")

    class Around:
        @hookimpl(wrapper=True)
        def rsdrill_phase(self, name: str) -> Generator[None, None, None]:
            calls.append("before")
            result = yield
            calls.append("after")
            return result

    events = RunEvents([Last(), Broken(), First(), Around()])
    events.emit("phase", name="setup")
    assert calls == ["before", "first setup", "broken setup", "last setup", "after"]
    assert "plugin Broken failed in rsdrill_phase" in caplog.text
    assert "KeyError" in caplog.text  # with its traceback
