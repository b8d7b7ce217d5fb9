"""The buckets' CORS document: browser viewers range-read objects from any origin.

Reads (``GET``/``HEAD``, with ``Range``) come from any origin; the headers a viewer needs
to read a chunk or a shard index are exposed.  ``PUT`` is allowed for uploads from a
browser through presigned URLs (each URL signs its key, its expiry, the body's
``Content-MD5`` and, except on DANDI's routes, the archive's ``Content-Type``: CORS opens
nothing a URL does not already allow).  The embargo bucket
gets the same document: its objects are only ever read through presigned URLs.
"""

from __future__ import annotations

from typing import Any

#: ``PutBucketCors``'s ``CORSConfiguration`` (the same JSON document works with
#: ``aws s3api put-bucket-cors --cors-configuration``).
BUCKET_CORS: dict[str, Any] = {
    "CORSRules": [
        {
            "AllowedOrigins": ["*"],
            "AllowedMethods": ["GET", "HEAD", "PUT"],
            "AllowedHeaders": ["*"],
            "ExposeHeaders": [
                "ETag",
                "Content-Length",
                "Content-Range",
                "Accept-Ranges",
                "Content-Type",
                "Last-Modified",
                "x-amz-version-id",
            ],
            "MaxAgeSeconds": 3600,
        }
    ]
}
