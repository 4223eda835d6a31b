#!/usr/bin/env bash
# On a GPU machine whose Python has torch, numpy and pandas but no notebook packages: optionally measure
# into DATA, then execute every page of the book against DATA with nbclient and save the executed
# notebooks into OUT. The notebook packages come from the wheels in .whl/ (made by `make wheels`).
#
#   bash notes/regenerate.sh [--measure] [DATA (default data/<this machine>)] [OUT (default _build/executed)]
set -euo pipefail
cd "$(dirname "$0")/.."
measure=0
if [ "${1:-}" = "--measure" ]; then measure=1; shift; fi
site=${MAGE_SITE:-/tmp/site}
wheels=${MAGE_WHEELS:-.whl}

ls "$wheels"/*.whl >/dev/null 2>&1 || { echo "regenerate: no wheels in $wheels/ (run 'make wheels' where PyPI is reachable)" >&2; exit 2; }
python3 -m pip install --quiet --no-index --no-deps --target "$site" "$wheels"/*.whl
# Where the machine already has a package at least as new as the wheel's, drop the wheel's copy, so that
# torch and pandas keep importing what they were installed with.
python3 - "$site" <<'PY'
import importlib.metadata as md, pathlib, re, shutil, sys
site = pathlib.Path(sys.argv[1])
def key(v):
    return tuple(int(x) for x in re.findall(r"\d+", v)[:4])
for info in sorted(site.glob("*.dist-info")):
    meta = md.Distribution.at(info)
    name, ours = meta.metadata["Name"], meta.version
    try:
        theirs = md.version(name)
    except md.PackageNotFoundError:
        continue
    if key(theirs) < key(ours):
        continue
    for f in meta.files or []:
        p = (site / f).resolve()
        if p.is_file() and site.resolve() in p.parents:
            p.unlink()
    shutil.rmtree(info, ignore_errors=True)
    print(f"  using the machine's {name} {theirs} (wheel has {ours})")
PY
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"

machine=$(python3 -m mage machine-name)
data=${1:-data/$machine}
out=${2:-_build/executed}
if [ "$measure" = 1 ]; then
  python3 -m mage measure --all --out "$data"
fi
MAGE_DATA="$data" python3 notes/execute.py --out "$out"
