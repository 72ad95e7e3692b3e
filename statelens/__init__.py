"""statelens: open an Apache Spark Structured Streaming checkpoint and see what happened inside it.

As a library::

    import statelens
    ck = statelens.open("s3://bucket/checkpoints/job")
    ck.state(0).to_pandas()

(:func:`open`, :class:`Checkpoint`: ``docs/api.md``; :func:`fleet`, every checkpoint below a folder
or prefix: ``docs/fleet.md``.)

The installed distribution has this one import root. In the repository, ``app/``, ``readers/`` and
``viewers/`` stay at the top level (the product's layout) and this folder links them in as
``statelens.app``, ``statelens.readers`` and ``statelens.viewers``; a wheel holds real copies.

``statelens.__version__`` reads the package metadata when it is first asked for: importing
:mod:`importlib.metadata` and finding the distribution costs every command ~40-140 ms it does not use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from statelens.app.api import Checkpoint, Fleet

__all__ = ["Checkpoint", "Fleet", "__version__", "fleet", "open"]


def open(path: str, **options: Any) -> Checkpoint:  # noqa: A001  # statelens.open, as fsspec.open
    """Open a checkpoint: :func:`statelens.app.api.open` (imported on first use, so ``import statelens``
    stays light)."""
    from statelens.app.api import open as _open

    return _open(path, **options)


def fleet(root: str, **options: Any) -> Fleet:
    """Every checkpoint below a folder or prefix, one row each, worst first: :func:`statelens.app.api.fleet`
    (imported on first use)."""
    from statelens.app.api import fleet as _fleet

    return _fleet(root, **options)


def __getattr__(name: str) -> Any:
    if name == "Checkpoint":
        from statelens.app.api import Checkpoint

        return Checkpoint
    if name == "Fleet":
        from statelens.app.api import Fleet

        return Fleet
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import metadata  # read when asked: importlib.metadata costs every command 40-140 ms

    try:
        version = metadata.version("statelens")
    except metadata.PackageNotFoundError:  # a source checkout that was never installed
        version = "0+unknown"
    globals()["__version__"] = version
    return version
