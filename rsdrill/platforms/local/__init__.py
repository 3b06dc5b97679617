"""`platform: local`: member processes already running on this machine, found by port."""

from rsdrill.platforms.base import PackagePlatform

platform = PackagePlatform("local", __name__, checks="rsdrill.platforms.machine.options")
