"""A Spark Connect server on loopback for the tests, started from the installed PySpark
(``sbin/start-connect-server.sh --wait``, in the foreground) and stopped afterwards.

    with ConnectServer(tmp_dir) as server:
        server.url                    # sc://127.0.0.1:PORT

:meth:`ConnectServer.start` raises :class:`tests.spark_cluster.ClusterUnavailable` when the server does
not come up in time.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType

from tests.spark_cluster import START_TIMEOUT_S, ClusterUnavailable, _free_port, spark_home


class ConnectServer:
    """A Spark Connect server (its Spark on ``master``) whose logs go under ``root``."""

    def __init__(self, root: Path, master: str = "local[2]"):
        self.root = Path(root)
        self.master = master
        self.url = ""
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ConnectServer:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> str:
        self.root.mkdir(parents=True, exist_ok=True)
        home = spark_home()
        script = home / "sbin" / "start-connect-server.sh"
        if not script.is_file():
            raise ClusterUnavailable(f"no {script} in the installed PySpark")
        for tool in [script, home / "sbin" / "spark-daemon.sh", home / "sbin" / "spark-config.sh"]:
            tool.chmod(tool.stat().st_mode | 0o111)  # wheels may drop the executable bits
        port = _free_port()
        env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(self.root),
            "SPARK_PID_DIR": str(self.root),
        }
        log = self.root / "connect-server.log"
        argv = [
            "bash",
            str(script),
            "--wait",
            "--master",
            self.master,
            *["--conf", f"spark.connect.grpc.binding.port={port}"],
            *["--conf", "spark.connect.grpc.binding.address=127.0.0.1"],
            *["--conf", "spark.ui.enabled=false"],
        ]
        with open(log, "wb") as out:
            self._proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            if re.search(r"Spark Connect server started at", text):
                self.url = f"sc://127.0.0.1:{port}"
                return self.url
            if self._proc.poll() is not None:
                raise ClusterUnavailable(
                    f"the Spark Connect server exited ({self._proc.returncode}): {text[-2000:]}"
                )
            time.sleep(0.2)
        self.stop()
        raise ClusterUnavailable(f"the Spark Connect server did not start within {START_TIMEOUT_S:.0f} s")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
