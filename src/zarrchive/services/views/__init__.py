"""The read models of the pages: the catalog, a dandiset's summary, arrays and their chunks
read within bounds, thumbnails, NGFF, open-with links, codec names, shard indexes.

One module per concept; import the module itself (this package re-exports nothing).
"""
