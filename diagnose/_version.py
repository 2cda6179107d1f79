"""The package version (one place; the CLI and reports read it here)."""

__version__ = "0.1.0"
