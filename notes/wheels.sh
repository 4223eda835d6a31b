#!/usr/bin/env bash
# Download the wheels of notes/wheels.txt for Python 3.12 (manylinux x86_64) into .whl/ at the repository
# root, for executing the pages on a GPU machine whose Python has no notebook packages (notes/regenerate.sh).
# MAGE_WHEELS and MAGE_PYVER choose another folder and Python version (the local test of the script);
# MAGE_WHEEL_LIST another list (notes/wheels_libraries.txt: the libraries the blocks are compared with).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${MAGE_WHEELS:-.whl}
pyver=${MAGE_PYVER:-3.12}
mkdir -p "$dest"
grep -v '^\s*#' "${MAGE_WHEEL_LIST:-notes/wheels.txt}" | grep -v '^\s*$' > "$dest/requirements.txt"
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$dest" -r "$dest/requirements.txt" 2> >(grep -v "^WARNING: Location" >&2)
n=$(ls "$dest"/*.whl | wc -l)
echo "$n wheels in $dest/ ($(du -sh "$dest" | cut -f1)) for Python $pyver; want $(wc -l < "$dest/requirements.txt")"
