#!/usr/bin/env bash
# Issue 41's GPU run: the scanned bench (scripts/bench_build.py --only scanned-full --device cuda) on a lent GPU
# machine, whose image has torch and transformers but not the rest (no byaldi, pydantic, poppler nor Tesseract),
# and no network.
#
#   bash scripts/gpu_scanned.sh fetch     # here, once: what that machine lacks, into .gpu/ (ignored, about 48 MB)
#   bash scripts/gpu_scanned.sh run       # there (the device tool's run, carry [".gpu"]): unpacks it, then the bench
#   bash scripts/gpu_scanned.sh run --only scanned --device cpu --pdfs 4    # here: the same steps on this CPU
#
# fetch: wheels for Python 3.12 (the machine's), the versions this tree is tested with, and Debian's poppler and
# Tesseract with the libraries their programs load, found by ldd here (glibc, libstdc++, libgcc and zlib left to
# the machine). run: the wheels into /tmp/lgpt-site (PYTHONPATH), the .debs unpacked under /tmp/lgpt-root, never
# over /, and each program run through a wrapper that points it at those libraries alone (the Python that holds
# torch keeps the machine's own); Tesseract's English data named by TESSDATA_PREFIX. Arguments after `run` go to
# bench_build.py (default: --only scanned-full --device cuda). Where a GPU is lent (issue 41): this prints the
# encoder's pages/s with OCR beside it and without, against byaldi's whole index in its bfloat16.
set -euo pipefail
cd "$(dirname "$0")/.."
PARTS=.gpu
WHEELS=(byaldi==0.0.7 colpali-engine==0.3.18 pdf2image==1.17.0 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0
        typing-inspection==0.4.5 srsly==2.5.6 catalogue==2.0.10 PyStemmer==3.1.0 py3langid==0.4.0 rapidfuzz==3.14.6
        platformdirs==4.14.9 tesserocr==2.13.0 reportlab==5.1.0)
PROGRAMS=(pdftoppm pdftotext pdfinfo tesseract)
KEEP_THEIRS='^(libc6|libgcc-s1|libstdc\+\+6|zlib1g)$'

fetch() {
  for program in "${PROGRAMS[@]}"; do
    command -v "$program" > /dev/null || { echo "gpu_scanned.sh: no $program here (scripts/bootstrap.sh installs it)" >&2; exit 2; }
  done
  rm -rf "$PARTS" && mkdir -p "$PARTS/whl" "$PARTS/deb"
  local platforms=()
  for tag in manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
    platforms+=(--platform "${tag}_x86_64")
  done
  PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS= python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${platforms[@]}" -d "$PARTS/whl" "${WHEELS[@]}"
  local library owner packages=(tesseract-ocr-eng)
  for program in "${PROGRAMS[@]}"; do
    packages+=("$(dpkg -S "$(readlink -f "$(command -v "$program")")" | cut -d: -f1)")
  done
  for library in $(for program in "${PROGRAMS[@]}"; do ldd "$(command -v "$program")"; done | awk '/=>/ {print $3}' | sort -u); do
    # the package holding it (merged /usr: as /lib or /usr/lib), amd64's only
    owner=$(dpkg -S "*/$(basename "$library")" 2>/dev/null | grep -v '^diversion' | cut -d: -f1 | tr ', ' '\n\n' \
            | grep -v -e '^$' -e '^lib32' -e '^libx32' | sort -u | head -1) || true
    [ -n "$owner" ] || { echo "gpu_scanned.sh: $library belongs to no package: not carried" >&2; continue; }
    packages+=("$owner")
  done
  # the archive's versions (a stable release's updates keep their libraries' ABI; the ones installed here may be gone)
  (cd "$PARTS/deb" && apt-get download -q=2 $(printf '%s\n' "${packages[@]}" | sort -u | grep -Ev "$KEEP_THEIRS"))
  du -sh "$PARTS"/*
}

run() {
  local root=/tmp/lgpt-root site=/tmp/lgpt-site
  [ -d "$PARTS/whl" ] || { echo "gpu_scanned.sh: no $PARTS/ here: first 'bash scripts/gpu_scanned.sh fetch' (and carry it)" >&2; exit 2; }
  rm -rf "$root" "$site" && mkdir -p "$root/bin"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$PARTS"/whl/*.whl
  for deb in "$PARTS"/deb/*.deb; do dpkg-deb -x "$deb" "$root"; done
  for program in "${PROGRAMS[@]}"; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu" \
      "$root/usr/bin/$program" > "$root/bin/$program"
    chmod +x "$root/bin/$program"
  done
  local tessdata
  tessdata=$(find "$root/usr/share" -name eng.traineddata -printf '%h\n' | head -1)
  [ -n "$tessdata" ] || { echo "gpu_scanned.sh: no eng.traineddata in $PARTS/deb" >&2; exit 2; }
  export PATH="$root/bin:$PATH" PYTHONPATH="$site:$PWD" TESSDATA_PREFIX="$tessdata" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
  pdftoppm -v 2>&1 | head -1 && tesseract --list-langs 2>&1 | tr '\n' ' ' && echo
  python3 -c "import torch; print('torch', torch.__version__, 'cuda' if torch.cuda.is_available() else 'no cuda',
torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
  python3 -m localgpt_index doctor || true
  local args=("$@")
  [ ${#args[@]} -gt 0 ] || args=(--only scanned-full --device cuda)
  python3 scripts/bench_build.py "${args[@]}"
}

case "${1:-}" in
  fetch) fetch ;;
  run) shift; run "$@" ;;
  *) echo "usage: bash scripts/gpu_scanned.sh fetch | run [bench_build.py's arguments]" >&2; exit 2 ;;
esac
