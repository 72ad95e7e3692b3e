# Sourced by run.sh and test.sh: make sure the project's virtual environment (.venv) exists and put it first
# on PATH. Never installs into the system interpreter (a stock Debian/Ubuntu Python refuses that, PEP 668).
# Uses $STATELENS_PYTHON, else python3 from PATH (pyenv, conda and system Pythons alike); on Debian/Ubuntu
# it installs python3-venv with apt when the interpreter cannot create a venv with pip in it.

_py="${STATELENS_PYTHON:-python3}"
if ! command -v "$_py" >/dev/null 2>&1; then
  echo "statelens: $_py not found; install Python 3.10 or newer (apt-get install python3)" >&2
  exit 2
fi
if ! "$_py" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "statelens: $("$_py" --version 2>&1) is too old; statelens needs Python 3.10 or newer" >&2
  exit 2
fi

if [ ! -x .venv/bin/python ]; then
  if ! "$_py" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
      _ver=$("$_py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
      _sudo=""; [ "$(id -u)" = 0 ] || _sudo=sudo
      $_sudo apt-get update -qq
      # python3-venv follows the distribution's default python3; pythonX.Y-venv matches this interpreter.
      DEBIAN_FRONTEND=noninteractive $_sudo apt-get install -y -qq python3-venv "python${_ver}-venv" \
        || DEBIAN_FRONTEND=noninteractive $_sudo apt-get install -y -qq python3-venv
    else
      echo "statelens: $_py cannot create a virtual environment (no ensurepip/venv); install your" \
           "distribution's venv package for it" >&2
      exit 2
    fi
  fi
  rm -rf .venv
  "$_py" -m venv .venv
fi
export VIRTUAL_ENV="$PWD/.venv"
export PATH="$VIRTUAL_ENV/bin:$PATH"
unset _py _ver _sudo
