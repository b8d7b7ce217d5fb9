"""The Zarr engine: Zarrs, batched uploads and their apply, the tree and its node cache,
manifests and change records, snapshots, fsck, reference files, history and rollback,
shared Zarrs, gc of old S3 versions.

One module per concept; import the module itself (this package re-exports nothing).
"""
