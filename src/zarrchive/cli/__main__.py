"""``python -m zarrchive.cli``."""

from zarrchive.cli import main

main()
