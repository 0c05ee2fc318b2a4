#!/usr/bin/env bash
# Idempotent set-up on a fresh Debian/Ubuntu machine: poppler and LibreOffice from
# apt, then .venv with the project, its test extras and the torch/torchvision pairing
# from constraints.txt. Re-running does nothing that is already done.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(poppler-utils tesseract-ocr tesseract-ocr-eng libreoffice-writer-nogui libreoffice-calc-nogui libreoffice-impress-nogui)
if command -v dpkg >/dev/null && command -v apt-get >/dev/null; then
  missing=()
  for pkg in "${apt_packages[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "bootstrap: installing ${missing[*]}" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
else
  for tool in pdftoppm soffice; do
    command -v "$tool" >/dev/null || { echo "bootstrap: $tool is missing; install poppler and LibreOffice" >&2; exit 4; }
  done
fi

python=${PYTHON:-python3}
stamp=.venv/.lgpt-bootstrap
want=$(cat pyproject.toml constraints.txt scripts/bootstrap.sh | sha256sum | cut -d' ' -f1)  # (this script too: a changed install redoes it)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "bootstrap: preparing .venv (torch and friends: a few GB, one to two minutes)" >&2
  [ -x .venv/bin/python ] || "$python" -m venv .venv
  # Keep the machine's pip config (a local CPU-only torch wheel) out: it does not
  # import beside PyPI's torchvision. uv (which reads no pip config) installs the rest:
  # the same versions as pip, downloaded in parallel, in about half pip's time. Compiled to bytecode as pip
  # does: where PYTHONDONTWRITEBYTECODE is set (CI sets it), a venv without .pyc files compiles torch and
  # transformers again in every process (importing byaldi: 11.8 s of CPU instead of 5.5 s).
  PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS= PIP_DISABLE_PIP_VERSION_CHECK=1 .venv/bin/python -m pip install -q uv
  .venv/bin/python -m uv pip install -q --compile-bytecode --python .venv/bin/python -c constraints.txt -e '.[test]'
  echo "$want" > "$stamp"
fi
