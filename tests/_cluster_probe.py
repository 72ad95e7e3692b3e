"""Run statelens commands in one driver process against a Spark master, or through a Spark Connect server
(a subprocess of the cluster tests: the test process already holds a local SparkContext, and a JVM can
hold only one).

    python -m tests._cluster_probe MASTER_OR_SC_URL OUT_DIR COMMANDS_JSON

``COMMANDS_JSON`` is a file holding ``{"name": [argv...], ...}``; each command's stdout, stderr and exit
code go to ``OUT_DIR/<name>.out``, ``.err`` and ``.rc``. With a master, the session is started here
first, so the commands' Spark backend uses it (and does not stop it between commands); with an
``sc://`` URL each command connects with ``--spark-remote`` (this process starts no JVM).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    master, out_dir, commands_file = argv
    from pyspark.sql import SparkSession

    remote = master.startswith("sc://")
    spark = (
        None
        if remote
        else (
            SparkSession.builder.master(master)
            .appName("statelens-cluster-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.executor.memory", "512m")
            .config("spark.driver.host", "127.0.0.1")
            .getOrCreate()
        )
    )
    from statelens.app.cli import main as statelens

    out = Path(out_dir)
    commands = json.loads(Path(commands_file).read_text())
    try:
        for name, args in commands.items():
            stdout, stderr = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                try:
                    rc = statelens([*args, "--spark-remote" if remote else "--spark-master", master])
                except SystemExit as exit_:
                    rc = int(exit_.code or 0)
            (out / f"{name}.out").write_text(stdout.getvalue())
            (out / f"{name}.err").write_text(stderr.getvalue())
            (out / f"{name}.rc").write_text(str(rc))
    finally:
        if spark is not None:
            spark.stop()
        from pyspark import SparkContext

        assert not remote or SparkContext._gateway is None, "Spark Connect started a local JVM"
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
