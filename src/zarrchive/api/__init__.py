"""The HTTP API (FastAPI)."""

from zarrchive.api.app import create_app

__all__ = ["create_app"]
