"""`platform: local`: member processes already running on this machine, found by port."""

from rsdrill.platforms.base import PackagePlatform
from rsdrill.platforms.machine import INJECTORS

platform = PackagePlatform(
    "local",
    __name__,
    checks="rsdrill.platforms.machine.options",
    planner="rsdrill.platforms.local.target",
    injectors=INJECTORS,
)
