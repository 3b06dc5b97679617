"""Build hook (the project's metadata is in pyproject.toml): the compiled faultfs data path.

Where cargo is present, `pip install` builds `faultfs-rs/` (Rust) and puts its executable in
the package (`rsdrill/faultfs/rsdrill-faultfs`); a failed build only warns. Where it is not, the
package installs without it and faultfs serves with its Python layer.
"""

from __future__ import annotations

import shutil
import sys

from setuptools import setup


def _rust_extensions() -> list[object]:
    if shutil.which("cargo") is None:
        notice = "rsdrill: no cargo here: faultfs will use its Python layer (slower)"
        print(f"{notice}; install Rust (https://rustup.rs) and reinstall to build the compiled one",
              file=sys.stderr)  # fmt: skip
        return []
    from setuptools_rust import Binding, RustExtension

    return [
        RustExtension(
            {"rsdrill-faultfs": "rsdrill.faultfs.rsdrill-faultfs"},
            path="faultfs-rs/Cargo.toml",
            binding=Binding.Exec,
            debug=False,  # also for `pip install -e`: the data path's speed is its point
            optional=True,  # a failed build leaves the Python layer, with setuptools' warning
        )
    ]


if __name__ == "__main__":  # as setuptools' build backend runs it
    setup(rust_extensions=_rust_extensions())
