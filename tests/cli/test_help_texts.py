"""Help texts say what a command does (issue #41): ``verify`` transfers no data, so its
``--jobs`` are not "transfers", and no reStructuredText markup shows as literal backquotes."""

from __future__ import annotations

from typer.testing import CliRunner

from zarrchive.cli import app


def test_verify_help_offers_no_transfers_and_no_markup() -> None:
    shown = " ".join(CliRunner().invoke(app, ["verify", "--help"]).stdout.split())
    assert "no data transferred" in shown
    assert "transfers" not in shown and "``" not in shown
    assert "prefixed by missing (only in the archive), differs or extra (only local)" in shown
    assert "Parallel requests (listings, local hashing" in shown
