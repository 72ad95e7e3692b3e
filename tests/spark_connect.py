"""A Spark Connect server on loopback for the tests, started from the installed PySpark
(``sbin/start-connect-server.sh --wait``, in the foreground) and stopped afterwards.

    with ConnectServer(tmp_dir) as server:
        server.url                    # sc://127.0.0.1:PORT

:meth:`ConnectServer.start` raises :class:`tests.spark_cluster.ClusterUnavailable` when the server does
not come up in time.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.spark_cluster import ClusterUnavailable, JvmServices, _free_port, spark_home


class ConnectServer(JvmServices):
    """A Spark Connect server (its Spark on ``master``) whose logs go under ``root``."""

    def __init__(self, root: Path, master: str = "local[2]"):
        super().__init__(root)
        self.master = master
        self.url = ""

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
        self._spawn("connect-server", argv, env, r"Spark Connect server started at")
        self.url = f"sc://127.0.0.1:{port}"
        return self.url
