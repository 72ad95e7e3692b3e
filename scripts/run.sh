#!/usr/bin/env bash
# Install statelens and open the desktop app (on the bundled sample checkpoint when no path is given).
# Usage: bash scripts/run.sh [CHECKPOINT_PATH_OR_URL]
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e .
exec statelens "$@"
