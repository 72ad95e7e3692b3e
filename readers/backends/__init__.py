"""Twin backends with one contract (:class:`readers.backends.base.StateBackend`): the native decoder and
Spark's own state data sources.

``native`` (:mod:`readers.backends.native`) decodes files itself; ``spark``
(:mod:`readers.backends.spark`) asks a SparkSession; ``auto`` uses native where it can decode a store
(known provider and schema) and Spark otherwise. Consumers get a backend from :class:`BackendChooser`
(or :func:`native_backend`), never a store reader.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statelens.readers.backends.base import StateBackend
from statelens.readers.backends.native import NativeBackend
from statelens.readers.backends.spark import SparkBackend
from statelens.readers.errors import StatelensError, UsageError

if TYPE_CHECKING:
    from statelens.readers.checkpoint import Checkpoint

__all__ = ["BACKENDS", "BackendChooser", "NativeBackend", "StateBackend", "native_backend"]

BACKENDS = ("native", "spark", "auto")


class BackendChooser:
    """Hands out the backend for each store, creating the Spark one (and its session) only if needed.

    Parameters
    ----------
    ckpt : Checkpoint
        The opened checkpoint.
    name : str
        ``native``, ``spark`` or ``auto``.
    master, conf, spark, remote :
        Passed to :class:`readers.backends.spark.SparkBackend` (``remote``: a Spark Connect endpoint).
    """

    def __init__(
        self,
        ckpt: Checkpoint,
        name: str = "auto",
        master: str | None = None,
        conf: dict[str, str] | None = None,
        spark: Any = None,
        remote: str | None = None,
    ):
        self.name = self.check_name(name)
        self.native = NativeBackend(ckpt)
        self._ckpt = ckpt
        self._spark_args = (master, conf, spark, remote)
        self._spark_backend: SparkBackend | None = None
        self.used: set[str] = set()

    @staticmethod
    def check_name(name: str) -> str:
        """``name`` when it is one of :data:`BACKENDS`, else a ``UsageError`` listing them."""
        if name not in BACKENDS:
            raise UsageError(f"unknown backend {name!r}; choose one of: {', '.join(BACKENDS)}")
        return name

    @property
    def spark(self) -> SparkBackend:
        if self._spark_backend is None:
            master, conf, spark, remote = self._spark_args
            self._spark_backend = SparkBackend(
                self._ckpt, master=master, conf=conf, spark=spark, remote=remote
            )
        return self._spark_backend

    def for_store(self, operator_id: int, store_name: str | None = None) -> StateBackend:
        """The backend that reads this store."""
        backend: StateBackend
        if self.name == "native" or (self.name == "auto" and self.native.can_read(operator_id, store_name)):
            backend = self.native
        else:
            backend = self.spark
        self.used.add(backend.name)
        return backend

    def for_column_families(self, operator_id: int) -> StateBackend:
        """The backend that reads a transformWithState operator's state variables and timers: ``auto``
        is native unless the native decoders cannot open its column families."""
        backend: StateBackend
        if self.name == "native" or (self.name == "auto" and self._native_reads_families(operator_id)):
            backend = self.native
        else:
            backend = self.spark
        self.used.add(backend.name)
        return backend

    def _native_reads_families(self, operator_id: int) -> bool:
        try:
            self.native.family_files(operator_id)
        except StatelensError:
            return False
        return True

    def describe(self) -> str:
        """Which backends answered, for the user."""
        parts = []
        if "native" in self.used:
            parts.append(self.native.describe())
        if "spark" in self.used:
            parts.append(self.spark.describe())
        return " and ".join(parts) or "no state read"

    def cancel(self) -> None:
        """Cancel the Spark reads in flight (native reads stop through their job's generator)."""
        if self._spark_backend is not None:
            self._spark_backend.cancel()

    def close(self) -> None:
        """Cancel Spark reads and stop a session the Spark backend started (see ``SparkBackend.close``)."""
        if self._spark_backend is not None:
            self._spark_backend.close()


def native_backend(ckpt: Checkpoint, backends: BackendChooser | None = None) -> NativeBackend:
    """The native backend of ``backends``, or a new one over ``ckpt`` (readers are cached by the checkpoint)."""
    return backends.native if backends is not None else NativeBackend(ckpt)
