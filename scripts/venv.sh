# Sourced by the scripts: create .venv on first use and (re)install modelfn with its
# dev extras whenever pyproject.toml changed since the last install. The installer's
# output goes to .venv/install.log and is shown only when it fails.
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.modelfn-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "installing modelfn and its dev tools into .venv: about 1.2 GB, 2-3 minutes the first time (log: .venv/install.log)"
  if ! { .venv/bin/python -m pip install --upgrade pip &&
         .venv/bin/python -m pip install -e '.[dev,lambda,local]'; } > .venv/install.log 2>&1; then
    tail -n 40 .venv/install.log
    echo "installing into .venv failed (full log: .venv/install.log)" >&2
    exit 1
  fi
  touch "$stamp"
fi
