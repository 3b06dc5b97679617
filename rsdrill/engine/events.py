"""The run's plugin manager: the built-in report writers, the plugins of the `rsdrill.plugins`
entry-point group and the run's own, and how the runner tells them an event."""

from __future__ import annotations

import functools
import logging
import types
from collections.abc import Callable, Iterable
from typing import Any

import pluggy

from rsdrill import hooks
from rsdrill.report import plugin as report_plugin

_log = logging.getLogger(__name__)

_HOOK_NAMES = tuple(name for name in vars(hooks.RunEvents) if name.startswith("rsdrill_"))


class RunEvents:
    """Tells every plugin of one run each event (see `rsdrill/hooks.py`), through pluggy's own
    caller (its order, `tryfirst`/`trylast`, wrappers). A plugin's failure is logged and the
    run goes on; only the built-in report writer's (the CONTRACT's) is the run's."""

    def __init__(self, plugins: Iterable[object] = ()) -> None:
        self.manager = pluggy.PluginManager(hooks.PROJECT)
        self.manager.add_hookspecs(hooks.RunEvents)
        self.manager.register(report_plugin, name="rsdrill.report")
        self.manager.load_setuptools_entrypoints(hooks.GROUP)
        for plugin in plugins:
            self.manager.register(plugin)
        for name, plugin in list(self.manager.list_name_plugin()):
            if plugin is not report_plugin and plugin is not None:
                self.manager.unregister(plugin)
                # An unnamed plugin's pluggy name is its id(): the log names its class instead.
                label = type(plugin).__name__ if name.isdigit() else name
                self.manager.register(self._guarded(plugin, label), name=name)

    def emit(self, event: str, **arguments: Any) -> None:
        """Call hook `rsdrill_<event>`."""
        getattr(self.manager.hook, f"rsdrill_{event}")(**arguments)

    def _guarded(self, plugin: object, name: str) -> object:
        """`plugin`'s hook implementations, each logging its own failure instead of raising
        (a wrapper is kept as it is: it must yield, and pluggy reports its failures)."""
        guarded = types.SimpleNamespace()
        for hook in _HOOK_NAMES:
            opts = self.manager.parse_hookimpl_opts(plugin, hook)
            if opts is None:
                continue
            function = getattr(plugin, hook)
            wrapper = opts.get("wrapper") or opts.get("hookwrapper")
            proxy = _passing_through(function) if wrapper else _logging(function, name, hook)
            setattr(guarded, hook, hooks.hookimpl(**opts)(proxy))
        return guarded


def _logging(function: Callable[..., Any], plugin: str, hook: str) -> Callable[..., Any]:
    @functools.wraps(function)
    def call(*args: Any) -> Any:
        try:
            return function(*args)
        except Exception:
            _log.exception("plugin %s failed in %s", plugin, hook)
            return None

    return call


def _passing_through(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def call(*args: Any) -> Any:
        return (yield from function(*args))

    return call
