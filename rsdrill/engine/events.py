"""The run's plugin manager: the built-in report writers, the plugins of the `rsdrill.plugins`
entry-point group and the run's own, and how the runner tells them an event."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import pluggy

from rsdrill import hooks
from rsdrill.report import plugin as report_plugin

_log = logging.getLogger(__name__)


class RunEvents:
    """Tells every plugin of one run each event (see `rsdrill/hooks.py`)."""

    def __init__(self, plugins: Iterable[object] = ()) -> None:
        self.manager = pluggy.PluginManager(hooks.PROJECT)
        self.manager.add_hookspecs(hooks.RunEvents)
        self.manager.register(report_plugin, name="rsdrill.report")
        self.manager.load_setuptools_entrypoints(hooks.GROUP)
        for plugin in plugins:
            self.manager.register(plugin)

    def emit(self, event: str, **arguments: Any) -> None:
        """Call hook `rsdrill_<event>`; a plugin that fails is logged, the run goes on."""
        hook = getattr(self.manager.hook, f"rsdrill_{event}")
        for impl in reversed(hook.get_hookimpls()):  # pluggy's own calling order
            try:
                impl.function(**{name: arguments[name] for name in impl.argnames})
            except Exception:
                if impl.plugin is report_plugin:
                    raise  # the CONTRACT's writer: its failure is the run's
                _log.exception("plugin %s failed in rsdrill_%s", impl.plugin_name, event)
