"""statelens: open an Apache Spark Structured Streaming checkpoint and see what happened inside it.

As a library::

    import statelens
    ck = statelens.open("s3://bucket/checkpoints/job")
    ck.state(0).to_pandas()

(:func:`open`, :class:`Checkpoint`: ``docs/api.md``.)

The installed distribution has this one import root. In the repository, ``app/``, ``readers/`` and
``viewers/`` stay at the top level (the product's layout) and this folder links them in as
``statelens.app``, ``statelens.readers`` and ``statelens.viewers``; a wheel holds real copies.
"""

from __future__ import annotations

from importlib import metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from statelens.app.api import Checkpoint

__all__ = ["Checkpoint", "__version__", "open"]

try:
    __version__ = metadata.version("statelens")
except metadata.PackageNotFoundError:  # a source checkout that was never installed
    __version__ = "0+unknown"


def open(path: str, **options: Any) -> Checkpoint:  # noqa: A001  # statelens.open, as fsspec.open
    """Open a checkpoint: :func:`statelens.app.api.open` (imported on first use, so ``import statelens``
    stays light)."""
    from statelens.app.api import open as _open

    return _open(path, **options)


def __getattr__(name: str) -> Any:
    if name == "Checkpoint":
        from statelens.app.api import Checkpoint

        return Checkpoint
    raise AttributeError(f"module 'statelens' has no attribute {name!r}")
