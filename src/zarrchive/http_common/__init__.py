"""What the archive's two HTTP faces share, below both: the JSON API (:mod:`zarrchive.api`)
and the web pages (:mod:`zarrchive.web`) each call the services, and neither imports the
other.

- :mod:`.errors`: the one mapping of the exception tree to HTTP statuses and answers;
- :mod:`.pagination`: DANDI's pages (``page``, ``page_size``, ``count``, ``next``, ``previous``);
- :mod:`.public_url`: the archive's public address (``ZARRCHIVE_PUBLIC_URL``) in place of the
  request's ``Host``;
- :mod:`.params`: path parameters both faces take.
"""
