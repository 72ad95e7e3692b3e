"""A Spark standalone cluster on loopback for the tests: one master and two workers, each its own JVM,
started from the installed PySpark (``spark-class org.apache.spark.deploy.master.Master`` /
``...worker.Worker``) and torn down afterwards.

    with StandaloneCluster(tmp_dir) as cluster:
        cluster.master_url            # spark://127.0.0.1:PORT
        cluster.executor_logs()       # the executors' stderr files, one folder per worker

:meth:`StandaloneCluster.start` raises :class:`ClusterUnavailable` (with the reason and the log tail)
when a JVM does not come up in time; callers fall back to ``local[*]`` and say so.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

#: Seconds a master or worker gets to start and register.
START_TIMEOUT_S = 90.0


class ClusterUnavailable(RuntimeError):
    """The standalone cluster could not start here (the message says why)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class JvmServices:
    """Spark JVMs started in their own process groups, each ready once its log shows a line; stopped in
    reverse order (SIGTERM to the group, SIGKILL after 20 s). A context manager: ``start()`` on entry."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []

    def __enter__(self) -> JvmServices:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> str:
        raise NotImplementedError

    def _spawn(self, name: str, argv: list[str], env: dict[str, str], ready: str) -> None:
        log = self.root / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self._procs.append((name, proc, log))
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            if re.search(ready, text):
                return
            if proc.poll() is not None:
                raise ClusterUnavailable(f"the {name} JVM exited ({proc.returncode}): {text[-2000:]}")
            time.sleep(0.2)
        raise ClusterUnavailable(
            f"the {name} did not start within {START_TIMEOUT_S:.0f} s: "
            f"{log.read_text(errors='replace')[-2000:]}"
        )

    def stop(self) -> None:
        for _name, proc, _log in reversed(self._procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for _name, proc, _log in reversed(self._procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self._procs.clear()


class StandaloneCluster(JvmServices):
    """Master and ``workers`` workers (1 core, 1 GiB each) under ``root``; logs and work folders inside it."""

    def __init__(self, root: Path, workers: int = 2):
        super().__init__(root)
        self.workers = workers
        self.master_url = ""

    def start(self) -> str:
        """Start the master, then the workers; returns the master URL once every worker registered."""
        self.root.mkdir(parents=True, exist_ok=True)
        home = spark_home()
        spark_class = home / "bin" / "spark-class"
        if not spark_class.is_file():
            raise ClusterUnavailable(f"no {spark_class} in the installed PySpark")
        env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_NO_DAEMONIZE": "1",
        }
        port = _free_port()
        self.master_url = f"spark://127.0.0.1:{port}"
        try:
            self._spawn(
                "master",
                [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
                + ["--port", str(port), "--webui-port", str(_free_port())],
                env,
                r"Starting Spark master at spark://",
            )
            for n in range(self.workers):
                work = self.root / f"worker-{n}"
                work.mkdir(exist_ok=True)
                self._spawn(
                    f"worker-{n}",
                    [str(spark_class), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1"]
                    + ["--cores", "1", "--memory", "1g", "--webui-port", str(_free_port())]
                    + ["--work-dir", str(work), self.master_url],
                    env,
                    r"Successfully registered with master",
                )
        except BaseException:
            self.stop()
            raise
        return self.master_url

    # -- evidence ----------------------------------------------------------------------------------------
    def executor_logs(self) -> dict[str, list[Path]]:
        """Per worker, the stderr files of the executors it ran (``work/app-*/<id>/stderr``)."""
        return {
            f"worker-{n}": sorted((self.root / f"worker-{n}").glob("app-*/*/stderr"))
            for n in range(self.workers)
        }
