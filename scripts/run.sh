#!/usr/bin/env bash
# Install statelens into the project's virtual environment (.venv) and open the desktop app (on the bundled
# sample checkpoint when no path is given). Any statelens arguments work too: `bash scripts/run.sh --help`.
# Usage: bash scripts/run.sh [CHECKPOINT_PATH_OR_URL | statelens arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh
python -m pip install -q --disable-pip-version-check -e .
exec statelens "$@"
