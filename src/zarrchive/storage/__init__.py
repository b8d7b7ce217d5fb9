"""The S3 edge: object store, key layout, presigning, embedded SeaweedFS."""

from zarrchive.storage.objects import ObjectInfo, ObjectStore, ObjectVersion

__all__ = ["ObjectInfo", "ObjectStore", "ObjectVersion"]
