"""Files shipped inside the statelens distribution (``statelens/resources/``): the sample checkpoint and
the app icon, found through :mod:`importlib.resources` so that a source checkout and an installed wheel
behave alike."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from statelens.readers.errors import MissingFileError


def resource_path(*parts: str) -> Path:
    """Path of ``statelens/resources/<parts...>`` on disk.

    Parameters
    ----------
    *parts : str
        Path components under ``resources/``.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    MissingFileError
        When it is not installed, or not as a file or folder on disk (statelens run from a zip).
    """
    found = resources.files("statelens").joinpath("resources", *parts)
    if not isinstance(found, Path) or not found.exists():
        raise MissingFileError("this statelens installation does not hold it as a file on disk", str(found))
    return found


def sample_checkpoint_path() -> Path:
    """The small sample checkpoint bundled with statelens (an applyInPandasWithState query that leaks).

    Returns
    -------
    pathlib.Path

    Raises
    ------
    MissingFileError
        When the installation lacks it.
    """
    sample = resource_path("sample_checkpoint")
    if not (sample / "metadata").is_file():
        raise MissingFileError("the bundled sample checkpoint has no metadata file", str(sample / "metadata"))
    return sample


def icon_path() -> Path:
    """The application icon (PNG, 256 px; ``statelens.svg`` beside it is its source)."""
    return resource_path("icons", "statelens.png")
