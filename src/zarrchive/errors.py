"""The one exception tree of zarrchive.

Every error the library, the server or the client raises on purpose derives from
:class:`ZarrchiveError`.  The API maps the classes below to HTTP status codes in
one place (``zarrchive.http_common.errors``); the CLI turns them into one-line messages.

Messages say what was wrong and what to do about it.
"""

from __future__ import annotations

from typing import Any


class ZarrchiveError(Exception):
    """Base class of every zarrchive error."""

    def __init__(self, message: str, *, detail: Any = None) -> None:
        super().__init__(message)
        self.message = message
        #: Structured detail for API responses (defaults to the message).
        self.detail: Any = detail if detail is not None else message


# -- bad input (HTTP 400) ---------------------------------------------------
class InvalidInput(ZarrchiveError):
    """The request or argument is malformed or violates a limit."""


class InvalidPath(InvalidInput):
    """A Zarr entry path is not a valid relative, '/'-separated path."""


class InvalidDigest(InvalidInput):
    """An md5 or a Dandi Zarr checksum string is malformed."""


class InvalidChecksumNode(InvalidInput):
    """A ``.checksum`` node document is malformed or inconsistent."""


class UngroupedEntries(InvalidInput):
    """Entries given to the streaming tree hasher are not grouped by directory."""


class BatchTooLarge(InvalidInput):
    """A batch has more files than the server's limit."""


class RequestTooLarge(InvalidInput):
    """A request body is larger than the server accepts (HTTP 413)."""


class UploadVerificationFailed(InvalidInput):
    """Objects of a batch are missing in S3 or have the wrong ETag."""


# -- authentication and authorization (HTTP 401 / 403) ------------------------
class AuthenticationRequired(ZarrchiveError):
    """The operation needs a valid API token."""


class PermissionDenied(ZarrchiveError):
    """The authenticated user may not do this."""


class ZarrFrozen(PermissionDenied):
    """The Zarr belongs to a published version and can no longer change."""


# -- absent things (HTTP 404) -------------------------------------------------
class NotFound(ZarrchiveError):
    """The named resource does not exist (or is not visible to the caller)."""


class NoUploadInProgress(NotFound):
    """The Zarr has no open upload batch."""


class FilesNotFound(NotFound):
    """Paths named for deletion are not files of the Zarr (``detail["missing"]`` lists them);
    nothing was deleted."""


# -- conflicts (HTTP 409) -----------------------------------------------------
class Conflict(ZarrchiveError):
    """The resource's current state does not allow the operation."""


class UploadInProgress(Conflict):
    """The Zarr already has an open upload batch."""


# -- infrastructure (HTTP 500 / 502 / 503) ------------------------------------
class StorageError(ZarrchiveError):
    """The object store failed or answered unexpectedly."""


class StorageUnavailable(StorageError):
    """The object store can't be reached, stalls or says "later": retry (HTTP 503)."""


class ChecksumRefused(StorageError):
    """The object store refused an object whose stated checksum is not its content's (S3's
    ``BadDigest``, e.g. a wrong full-object CRC32 completing a multipart upload): nothing
    was written."""


class DatabaseUnavailable(ZarrchiveError):
    """The database can't be reached or lost the connection: retry (HTTP 503)."""


class SignInRefused(InvalidInput):
    """A sign-in through an identity provider did not prove who the browser is (a forged or
    stale ``state``, the provider's refusal, an ID token that fails its checks): nothing was
    made (HTTP 400)."""


class IdentityProviderUnavailable(ZarrchiveError):
    """An OpenID Connect provider can't be reached or answered unexpectedly (HTTP 502)."""


class DataCiteUnavailable(ZarrchiveError):
    """DataCite did not answer, or answered 5xx/429: a DOI job retries later."""


class DataCiteRefused(ZarrchiveError):
    """DataCite refused a DOI call (4xx): its message is recorded for the admins."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class ArchiveBusy(ZarrchiveError):
    """The archive is at its limit of concurrent heavy work: retry shortly (HTTP 503)."""


class CorruptChecksumNode(ZarrchiveError):
    """A ``.checksum`` node stored in S3 is unreadable: the archive's fault, repaired by
    ``zarrchive admin fsck ZARR_ID --repair``."""


class CorruptManifest(ZarrchiveError):
    """A stored manifest a published snapshot needs is unreadable or disagrees with its
    checksum: the archive's fault (HTTP 500, naming what an administrator must run)."""


class ConfigurationError(ZarrchiveError):
    """The archive's configuration is invalid or incomplete."""


# -- client side --------------------------------------------------------------
class ChecksumMismatch(ZarrchiveError):
    """A computed checksum differs from the expected one."""


class ApiError(ZarrchiveError):
    """The archive's API answered with an error (client side)."""

    def __init__(
        self, message: str, *, status_code: int, detail: Any = None, retried: bool = False
    ) -> None:
        super().__init__(message, detail=detail)
        self.status_code = status_code
        #: The request needed more than one attempt: an earlier one may have gone through
        #: (its answer lost), so a 404 or 409 may be the answer to this client's own change.
        self.retried = retried


class LocalFileError(ZarrchiveError):
    """A local file or directory cannot be read (missing, not a directory, unreadable, a loop)."""


class NetworkError(ZarrchiveError):
    """The archive's API or its object store could not be reached (client side)."""


class TransferError(ZarrchiveError):
    """An object could not be uploaded to or downloaded from the object store (client side)."""


class ObjectChanged(TransferError):
    """An object changed while a download read it: S3 answered 412 to a GET that had to
    match the ETag of the object's HEAD (``If-Match``)."""


# -- manifests and jobs ---------------------------------------------------------
class InvalidManifest(InvalidInput):
    """A Zarr manifest file (or the listing it is built from) is malformed or inconsistent."""


class InvalidJob(InvalidInput):
    """A background job is malformed: unknown function or arguments that are not JSON."""


class JobQueueClosed(Conflict):
    """A job was enqueued on a job queue that is closed or closing."""


# -- LINDI (HDF5/NWB as Zarr) -------------------------------------------------
class LindiError(ZarrchiveError):
    """Base class of the errors of :mod:`zarrchive.lindi`."""


class UnsupportedFilter(LindiError, InvalidInput):
    """An HDF5 dataset uses a filter that has no numcodecs equivalent."""


class UnsupportedLink(LindiError, InvalidInput):
    """An HDF5 file contains a link LINDI cannot represent (external links, cycles)."""


class PointsOutsideFile(LindiError, InvalidInput):
    """An HDF5 file names something outside it (external storage, a virtual dataset, a
    filter plugin): the archive never follows it."""


class UnsupportedReference(LindiError, InvalidInput):
    """An HDF5 file contains a reference LINDI cannot represent (region references)."""


class UnsupportedDatatype(LindiError, InvalidInput):
    """An HDF5 dataset or attribute has a type or shape LINDI cannot represent."""


class LindiTooLarge(LindiError, InvalidInput):
    """An HDF5 file is too big or too deep to convert within the archive's bounds."""


class InvalidLindiFile(LindiError, InvalidInput):
    """A LINDI reference file system or Zarr hierarchy is malformed."""


class ReferenceMismatch(LindiError, InvalidInput):
    """A LINDI reference points to an object whose ``object_id`` differs."""


class RemoteReadError(LindiError, StorageError):
    """A byte range of a remote file could not be read."""
