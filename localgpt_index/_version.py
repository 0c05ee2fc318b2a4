"""The package version: a leaf module, so that the manifest and the CLI read it without importing the package's API."""

__version__ = "0.4.0"
