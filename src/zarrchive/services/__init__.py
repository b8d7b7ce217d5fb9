"""Domain operations in transactions; no HTTP types here.

Four packages by concept, one module per concept inside each: :mod:`.dandi` (the DANDI
domain: dandisets, versions, assets, blobs, publish, embargo, validation, ...),
:mod:`.zarr_engine` (Zarrs, uploads, the tree, manifests, snapshots, fsck, ...),
:mod:`.views` (the read models of the web pages) and :mod:`.identity` (accounts, keys,
callers, sign-in); :mod:`.runtime` (the :class:`~zarrchive.services.runtime.Archive`) and
:mod:`.periodic` at the root.  The API's routers and the web pages are two faces of the same
functions.  A function's first parameters say how it meets the database:

- ``session: Session`` (with or without the archive): it runs inside the caller's
  transaction, and may take and return ORM objects, which the caller uses before its
  ``with archive.db.session()`` block ends.
- ``archive: Archive`` without a session: it opens the sessions it needs itself, and takes
  and returns only plain values and frozen dataclasses (a :class:`~zarrchive.services.identity.auth.Caller`
  for who asks, a :class:`~zarrchive.services.zarr_engine.zarrs.ZarrRef` for a Zarr's S3 side, answers
  such as :class:`~zarrchive.wire.zarrs.ZarrInfo`), never an ORM object.

So no ORM object is used after its session closed.  ``tests/services/test_sessions.py``
checks the annotations, and the tests run with strict sessions
(``ZARRCHIVE_STRICT_SESSIONS``), where such a use fails.
"""
