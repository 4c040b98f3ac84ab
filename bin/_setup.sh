# Sourced by bin/dashboard and bin/test: make .venv with the pinned requirements, once
# per change of requirements.txt, then activate it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "mcap: creating .venv" >&2
  "$py" -m venv .venv
fi
stamp=".venv/.requirements.sha256"
want="$(sha256sum requirements.txt | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  echo "mcap: installing pinned requirements into .venv" >&2
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
  echo "$want" > "$stamp"
fi
# `python -m mcap` from any folder once the venv is active (README's first session)
site="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
[ "$(cat "$site/mcap-repo.pth" 2>/dev/null || true)" = "$root" ] || echo "$root" > "$site/mcap-repo.pth"
# shellcheck disable=SC1091
source .venv/bin/activate
# the byte-exact CPU memory counter (mcap/runner/memtrack.py) is compiled once per venv
export TORCH_EXTENSIONS_DIR="$root/.venv/torch_extensions"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
