"""The DANDI domain: dandisets, versions, assets, blobs, publication, embargo, validation,
search, owners and reviewers, audit, the trash, DOIs, LINDI files of assets, storage use.

One module per concept; import the module itself (this package re-exports nothing).
"""
