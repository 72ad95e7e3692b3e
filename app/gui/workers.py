"""The one runner of long work off the GUI thread.

Every reader or analysis call from the GUI goes through :class:`JobRunner`. A job is a generator
function that yields :class:`~readers.model.Progress` records and returns its result; it runs in
superqt's :class:`~superqt.utils.GeneratorWorker` on Qt's global thread pool.

* **Channels and tokens.** Each job runs on a named channel (``"load"``, ``"growth"``, ``"browser"``).
  Submitting a job cancels the channel's previous one; every job carries a token and callbacks of a
  job whose token is no longer current are dropped, so a late result never overwrites a newer one.
* **Cooperative cancel.** :meth:`JobRunner.cancel` calls ``worker.quit()``, which takes effect at the
  job's next yield; the job's generator is then closed in its own thread so its ``finally`` blocks
  free files and temporary folders.
* **Errors** go to ``on_error`` when given, else to :mod:`app.gui.errors`.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, QThreadPool, Signal
from superqt.utils import GeneratorWorker

from statelens.app.gui.errors import show_error
from statelens.readers.model import Progress

#: Milliseconds :meth:`JobRunner.shutdown` waits for running jobs to reach their next yield.
SHUTDOWN_TIMEOUT_MS = 5000


class _ClosingGeneratorWorker(GeneratorWorker):
    """A GeneratorWorker that closes its generator in the worker thread when it stops for any reason."""

    def work(self) -> Any:
        try:
            return super().work()
        finally:
            self._gen.close()


@dataclass
class Job:
    """One submitted job: its channel, token, worker and what it is doing."""

    channel: str
    token: int
    what: str
    worker: GeneratorWorker
    progress: Progress | None = None
    cancelled: bool = False


class JobRunner(QObject):
    """Runs generator jobs on worker threads, one per channel, and drops stale results.

    Signals
    -------
    job_started(str channel, str what)
    job_progressed(str channel, object progress)
        Only for current jobs.
    job_finished(str channel)
        When a job ends for any reason (result, error or cancel).
    idle_changed(bool idle)
        True when no job is running any more.
    """

    job_started = Signal(str, str)
    job_progressed = Signal(str, object)
    job_finished = Signal(str)
    idle_changed = Signal(bool)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._tokens = itertools.count(1)
        self._current: dict[str, Job] = {}
        self._running: dict[int, Job] = {}
        self._closed = False

    # -- queries -------------------------------------------------------------------------------------
    @property
    def idle(self) -> bool:
        """True when no job is running (cancelled jobs still winding down count as running)."""
        return not self._running

    @property
    def is_shut_down(self) -> bool:
        """True after :meth:`shutdown`: nothing more can be submitted."""
        return self._closed

    def current(self, channel: str) -> Job | None:
        """The current (not superseded) job of a channel, if still running."""
        job = self._current.get(channel)
        return job if job is not None and job.token in self._running else None

    def is_current(self, channel: str, token: int) -> bool:
        """Whether ``token`` is the latest job submitted on ``channel``."""
        job = self._current.get(channel)
        return job is not None and job.token == token and not job.cancelled

    def running_jobs(self) -> list[Job]:
        """Every job whose worker has not finished yet."""
        return list(self._running.values())

    # -- submitting ----------------------------------------------------------------------------------
    def submit(
        self,
        channel: str,
        func: Callable[..., Generator[Any, Any, Any]],
        *args: Any,
        what: str = "",
        on_result: Callable[[Any], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        on_yield: Callable[[Any], None] | None = None,
        **kwargs: Any,
    ) -> int:
        """Start ``func(*args, **kwargs)`` on a worker thread, replacing the channel's previous job.

        Parameters
        ----------
        channel : str
            Jobs on one channel supersede each other.
        func : generator function
            Yields Progress records (or other partial results, given to ``on_yield``) and returns the
            result. It receives a ``cancelled`` keyword argument (a callable) when it accepts one.
        what : str
            What the job does, for the status bar.
        on_result, on_error, on_yield : callable, optional
            Called on the GUI thread, only while the job is still current.

        Returns
        -------
        int
            The job's token.
        """
        if self._closed:
            raise RuntimeError("the job runner is shut down")
        self.cancel(channel)
        token = next(self._tokens)
        holder: dict[str, Job] = {}

        def cancelled() -> bool:
            job = holder.get("job")
            return job is None or job.cancelled or job.worker.abort_requested

        if _accepts_cancelled(func):
            kwargs = {**kwargs, "cancelled": cancelled}
        worker = _ClosingGeneratorWorker(func, *args, **kwargs)
        job = Job(channel, token, what, worker)
        holder["job"] = job
        was_idle = self.idle
        self._current[channel] = job
        self._running[token] = job

        worker.yielded.connect(lambda item: self._on_worker_yielded(job, item, on_yield))
        worker.returned.connect(lambda result: self._on_worker_returned(job, result, on_result))
        worker.errored.connect(lambda err: self._on_worker_errored(job, err, on_error))
        worker.finished.connect(lambda *_: self._on_worker_finished(job))
        worker.start()
        self.job_started.emit(channel, what)
        if was_idle:
            self.idle_changed.emit(False)
        return token

    def cancel(self, channel: str | None = None) -> None:
        """Ask the current job of ``channel`` (every channel when None) to stop at its next yield.

        Parameters
        ----------
        channel : str, optional
        """
        channels = list(self._current) if channel is None else [channel]
        for ch in channels:
            job = self._current.get(ch)
            if job is not None and not job.cancelled:
                job.cancelled = True
                job.worker.quit()

    def shutdown(self, timeout_ms: int = SHUTDOWN_TIMEOUT_MS) -> bool:
        """Cancel every job and wait for the workers to stop (on window close).

        Parameters
        ----------
        timeout_ms : int
            How long to wait for jobs to reach their next yield.

        Returns
        -------
        bool
            True when every worker stopped in time. Workers still running afterwards are detached:
            they stop at their next yield and nothing they emit reaches the runner or its callbacks.
        """
        self._closed = True
        self.cancel()
        for job in self.running_jobs():
            job.worker.quit()
        if QThreadPool.globalInstance().waitForDone(timeout_ms):
            return True
        # A job still inside one long step: it stops at its next yield, but its window may be gone by
        # then. Cut its signals so that nothing it emits reaches an object that no longer exists.
        for job in self.running_jobs():
            _detach(job.worker)
        return False

    # -- worker callbacks (GUI thread) ---------------------------------------------------------------
    def _on_worker_yielded(self, job: Job, item: Any, on_yield: Callable[[Any], None] | None) -> None:
        if not self.is_current(job.channel, job.token):
            return
        if isinstance(item, Progress):
            job.progress = item
            self.job_progressed.emit(job.channel, item)
        elif on_yield is not None:
            on_yield(item)

    def _on_worker_returned(self, job: Job, result: Any, on_result: Callable[[Any], None] | None) -> None:
        if self.is_current(job.channel, job.token) and on_result is not None:
            on_result(result)

    def _on_worker_errored(
        self, job: Job, err: BaseException, on_error: Callable[[BaseException], None] | None
    ) -> None:
        if not self.is_current(job.channel, job.token):
            return
        if on_error is not None:
            on_error(err)
        else:
            show_error(err, title=f"{job.what or job.channel} failed")

    def _on_worker_finished(self, job: Job) -> None:
        self._running.pop(job.token, None)
        if self._current.get(job.channel) is job:
            del self._current[job.channel]
        self.job_finished.emit(job.channel)
        if self.idle:
            self.idle_changed.emit(True)


def _detach(worker: GeneratorWorker) -> None:
    """Disconnect every slot from ``worker``'s signals (a disconnect of a signal without slots is fine)."""
    for signal in (worker.yielded, worker.returned, worker.errored, worker.finished, worker.started):
        try:
            signal.disconnect()
        except (RuntimeError, TypeError):
            pass  # nothing was connected to it


def _accepts_cancelled(func: Callable[..., Any]) -> bool:
    try:
        return "cancelled" in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
