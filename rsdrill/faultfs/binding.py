"""The FUSE binding of faultfs's Python layer: mfusepy (over libfuse3), an optional extra.

Only storage faults on sandbox or local members use it, and only where the compiled data path
is not built, so rsdrill does not require it: every import of it goes through `fuse_binding()`
(or `operations.py`, imported after it), which says in one line what to install.
"""

from __future__ import annotations

from types import ModuleType

from rsdrill.faultfs.mount import FaultFSError

EXTRA = "faultfs"
MISSING = (
    f"faultfs: the Python layer needs mfusepy, which is not installed: "
    f"pip install 'rsdrill[{EXTRA}]'"
)


def fuse_binding() -> ModuleType:
    """mfusepy, or FaultFSError with one line saying what is missing and how to install it."""
    try:
        import mfusepy
    except ModuleNotFoundError as exc:
        if exc.name != "mfusepy":  # mfusepy is there, something it imports is not
            raise FaultFSError(f"faultfs: mfusepy cannot be imported: {exc}") from exc
        raise FaultFSError(MISSING) from None
    except OSError as exc:  # mfusepy loads libfuse3 as it is imported
        raise FaultFSError(
            f"faultfs: libfuse3 cannot be loaded ({exc}): apt-get install fuse3"
        ) from exc
    return mfusepy
