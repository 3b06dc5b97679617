"""`platform: sandbox`: a replica set rsdrill builds for the run from emulator (or mongod)
processes on this machine, faulted as the local platform's members are."""

from rsdrill.platforms.base import PackagePlatform
from rsdrill.platforms.machine import INJECTORS
from rsdrill.platforms.machine.mirror import SandboxPlatform
from rsdrill.platforms.machine.ways import TITLE, WAYS

platform = PackagePlatform(
    "sandbox",
    __name__,
    checks="rsdrill.platforms.machine.options",
    planner="rsdrill.platforms.machine.mirror",
    options=SandboxPlatform,
    injectors=INJECTORS,
    ways=WAYS,
    title=TITLE,
    member_source="built",
    on_this_machine=True,
)
