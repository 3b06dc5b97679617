"""rsdrill's version (as pyproject.toml says), importable from any layer."""

__version__ = "0.1.0"
