"""Shared test helpers (import them; test modules never import each other)."""
