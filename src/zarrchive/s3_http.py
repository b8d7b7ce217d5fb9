"""What the client and the server both say to S3 over plain HTTP, and read from it: the
``Content-MD5`` header of an md5, and S3's reason in its XML error answer.

Pure (no I/O, no imports of the archive's modules): the client's uploads
(:mod:`zarrchive.client.upload`, :mod:`zarrchive.client.multipart`,
:mod:`zarrchive.client.s3_import`) and the server's object store
(:mod:`zarrchive.storage.objects`) import it alike.
"""

from __future__ import annotations

import base64


def md5_to_content_md5(md5_hex: str) -> str:
    """The ``Content-MD5`` header value (base64 of the digest bytes) of an md5 in hex."""
    return base64.b64encode(bytes.fromhex(md5_hex)).decode("ascii")


def s3_error_message(text: str) -> str:
    """S3's reason in the XML body *text* of an error answer: its ``<Message>``, else its
    ``<Code>``, else the body's first 200 characters."""
    for tag in ("Message", "Code"):
        start = text.find(f"<{tag}>")
        end = text.find(f"</{tag}>")
        if 0 <= start < end:
            return text[start + len(tag) + 2 : end]
    return text[:200]


__all__ = ["md5_to_content_md5", "s3_error_message"]
