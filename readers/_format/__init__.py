"""The on-disk format, private to ``readers``: decompression (``codecs``), record streams (``records``,
``kernels``), key numbering (``keyids``), UnsafeRow and Avro rows (``unsaferow``, ``unsaferow_arrow``,
``avro_rows``), row checksums (``rowchecksum``), and the store readers that replay a store's files
(``store_base``, ``hdfs_store``, ``rocksdb_store``, ``cf_store``, ``cf_codec``).

Nothing outside ``readers`` imports this package: the app and the viewers read state through
:mod:`readers.backends` and :mod:`readers.scan`, and write it through :mod:`readers.rewrite`. One
import-linter contract guards the whole package, so a module added here is private on arrival
(``pyproject.toml``, ``[tool.importlinter]``).
"""
