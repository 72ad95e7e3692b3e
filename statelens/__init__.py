"""statelens: open an Apache Spark Structured Streaming checkpoint and see what happened inside it.

The installed distribution has this one import root. In the repository, ``app/``, ``readers/`` and
``viewers/`` stay at the top level (the product's layout) and this folder links them in as
``statelens.app``, ``statelens.readers`` and ``statelens.viewers``; a wheel holds real copies.
"""

from __future__ import annotations

from importlib import metadata

try:
    __version__ = metadata.version("statelens")
except metadata.PackageNotFoundError:  # a source checkout that was never installed
    __version__ = "0+unknown"
