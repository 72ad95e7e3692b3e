#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine, then run it.
# Usage: bash scripts/test.sh [pytest args...]   (with arguments: pytest only after the checks, no mutation step)
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages: a Java 17+ runtime for PySpark, the libraries Qt's offscreen platform loads, and a
# headless browser.
missing=()
if ! command -v java >/dev/null 2>&1; then missing+=(openjdk-17-jre-headless); fi
# Headless Chromium renders the HTML report in a real browser in the tests.
if ! command -v chromium >/dev/null 2>&1; then missing+=(chromium); fi
for lib in libEGL.so.1:libegl1 libGL.so.1:libgl1 libxkbcommon.so.0:libxkbcommon0 \
           libfontconfig.so.1:libfontconfig1 libdbus-1.so.3:libdbus-1-3 libglib-2.0.so.0:libglib2.0-0; do
  if ! ldconfig -p | grep -q "${lib%%:*}"; then missing+=("${lib##*:}"); fi
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

. scripts/_venv.sh
python -m pip install -q --disable-pip-version-check -e ".[test]"

export QT_QPA_PLATFORM=offscreen
python -m ruff check app readers viewers tests statelens
python -m ruff format --check app readers viewers tests statelens
lint-imports
python -m mypy
# The documentation site (mkdocs.yml), warnings as errors, into a temporary folder that is never kept.
docs_site=$(mktemp -d)
trap 'rm -rf "$docs_site"' EXIT
python -m mkdocs build --strict --site-dir "$docs_site"  # not --quiet: it hides the warnings
# every test asserts something, and no assertion is true by its form (tests/guard.py)
python -m tests.guard
python -m pytest "$@"
# Mutation testing of every decoder module on a fixed sample of its mutants (docs/testing.md): after pytest,
# whose tests filled the checkpoint cache that the mutants are tested against; fails on a module under 85%.
# Only on a whole run (no pytest arguments).
if [ $# -eq 0 ]; then python -m tests.mutation --ci --max-children 2; fi
