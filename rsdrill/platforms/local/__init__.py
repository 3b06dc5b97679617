"""`platform: local`: member processes already running on this machine, found by port."""

from rsdrill.platforms.base import PackagePlatform
from rsdrill.platforms.machine import INJECTORS
from rsdrill.platforms.machine.ways import TITLE, WAYS

platform = PackagePlatform(
    "local",
    __name__,
    checks="rsdrill.platforms.machine.options",
    planner="rsdrill.platforms.local.target",
    injectors=INJECTORS,
    ways=WAYS,
    title=TITLE,
    member_source="listed",
    on_this_machine=True,
)
