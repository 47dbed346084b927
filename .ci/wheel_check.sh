#!/usr/bin/env bash
# Build the sdist and the wheel, install the wheel into a fresh virtual environment beside the
# pinned torch wheel, and run `implicit-em verify` and the README's three-regimes example from a
# temporary folder, so that the installed package is used and not the source tree. The
# environment is thrown away afterwards, so pip skips compiling bytecode (--no-compile).
# Usage: .ci/wheel_check.sh BUILD_PYTHON   (a Python with `build` installed: .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build_python=${1:?usage: .ci/wheel_check.sh BUILD_PYTHON}
python=${PYTHON:-python3}
torch_spec=${TORCH:-torch==2.13.0}
torch_index=(${TORCH_INDEX:+--index-url "$TORCH_INDEX"})

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

rm -rf dist
"$build_python" -m build --outdir dist . >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
wheel=$(ls dist/implicit_em-*.whl)
ls dist

"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --no-compile "${torch_index[@]}" "$torch_spec"
"$work/venv/bin/python" -m pip install --quiet --no-compile "$root/$wheel"

cd "$work"
"$work/venv/bin/implicit-em" verify
"$work/venv/bin/python" - "$root" <<'PY'
import importlib.metadata
import re
import sys
from pathlib import Path

import implicit_em

root = Path(sys.argv[1])
package = Path(implicit_em.__file__).resolve().parent
assert root not in package.parents, f"imported from the source tree: {package}"
assert (package / "py.typed").is_file(), "the wheel lacks the py.typed marker"
installed = importlib.metadata.version("implicit-em")
assert installed == implicit_em.__version__, (installed, implicit_em.__version__)

readme = (root / "README.md").read_text()
match = re.search(r"^## The three regimes.*?```python\n(.*?)```", readme, flags=re.S | re.M)
assert match, "README.md has no Python example under '## The three regimes'"
exec(compile(match.group(1), "README.md (the three regimes)", "exec"), {"__name__": "readme"})
print(f"implicit-em {installed} from {package}: py.typed present, README example ran")
PY
