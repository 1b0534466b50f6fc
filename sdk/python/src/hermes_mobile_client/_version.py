"""The package version, on its own so every module can name it without import cycles."""

__version__ = "0.1.0"
