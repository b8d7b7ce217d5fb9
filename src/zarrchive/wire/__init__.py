"""The JSON the archive's API answers, as types both sides import: the server builds them
(:mod:`zarrchive.services`, :mod:`zarrchive.api.schemas`) and the client reads them
(:mod:`zarrchive.client.api`), so each shape is written once.

Below the client and the server alike: the standard library only (the client starts
without pydantic), frozen dataclasses whose fields carry their description for the API's
``/docs`` (``dataclasses.field(metadata={"description": ...})``, which pydantic reads).
The API gives them its own names there (``DirectoryOut`` for
:class:`~zarrchive.wire.zarrs.DirectoryPage`) by subclassing them in
:mod:`zarrchive.api.schemas`.
"""
