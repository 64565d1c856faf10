#!/usr/bin/env bash
# The extension in real VS Code: installs code-server, Node 24 and a headless Chromium into a
# scratch folder outside the repository (once; about 1 GB), packages the extension, and runs
# test/e2e.mjs against the real `redraft serve`.
#
#   editors/vscode/test/run-e2e.sh
#
# Environment (all optional):
#   REDRAFT_E2E_DIR         scratch folder (default /tmp/redraft-e2e; code-server, Node 24 and Chromium go in its deps/)
#   REDRAFT_PYTHON          a Python that imports redraft (default: the active venv's, else python3)
#   REDRAFT_E2E_SCREENSHOT  screenshot path (default $REDRAFT_E2E_DIR/screenshot.png)
#   CHROME                  a Chromium/Chrome binary; default `chromium` on PATH, else npm @sparticuz/chromium
#   REDRAFT_E2E_KEEP=1      keep the run's workspace and logs even when it passes
set -euo pipefail

EXT=$(cd "$(dirname "$0")/.." && pwd)
REPO=$(cd "$EXT/../.." && pwd)
SCRATCH=${REDRAFT_E2E_DIR:-/tmp/redraft-e2e}
DEPS=$SCRATCH/deps
CODE_SERVER=4.139.1
PUPPETEER=25.16.0
SPARTICUZ=153.0.0
if [ -n "${VIRTUAL_ENV:-}" ]; then PYTHON=${REDRAFT_PYTHON:-$VIRTUAL_ENV/bin/python}; else PYTHON=${REDRAFT_PYTHON:-python3}; fi

case "$SCRATCH" in
  "$REPO"|"$REPO"/*) echo "REDRAFT_E2E_DIR must lie outside the repository" >&2; exit 2 ;;
esac
"$PYTHON" -c "import redraft.server.cli" || {
  echo "$PYTHON cannot import redraft: install it (pip install -e .) or set REDRAFT_PYTHON" >&2; exit 2; }

# 1. Dependencies, once: Node 24 (code-server needs it), code-server with its VS Code's runtime
#    modules, puppeteer-core and (unless a Chromium is given or on PATH) @sparticuz/chromium.
STAMP=$DEPS/.ready-$CODE_SERVER-$PUPPETEER-$SPARTICUZ
if [ ! -e "$STAMP" ]; then
  mkdir -p "$DEPS"
  cd "$DEPS"
  [ -e package.json ] || echo '{"name": "redraft-e2e-deps", "private": true}' > package.json
  npm install --no-audit --no-fund --ignore-scripts node@24 "code-server@$CODE_SERVER" \
    "puppeteer-core@$PUPPETEER" "@sparticuz/chromium@$SPARTICUZ"
  (cd node_modules/node && node installArchSpecificPackage)  # npm skipped it (--ignore-scripts)
  (cd node_modules/code-server/lib/vscode && npm install --no-audit --no-fund --omit=dev --ignore-scripts)
  touch "$STAMP"
fi
NODE24=$DEPS/node_modules/node/bin/node
"$NODE24" --version >/dev/null

# 2. The extension, from a clean install, as a user gets it.
cd "$EXT"
npm ci --no-audit --no-fund
npm run package
VERSION=$(node -p 'require("./package.json").version')

# 3. The test.
REDRAFT_E2E_DEPS=$DEPS REDRAFT_VSIX=$EXT/redraft-$VERSION.vsix REDRAFT_PYTHON=$PYTHON \
REDRAFT_E2E_SCREENSHOT=${REDRAFT_E2E_SCREENSHOT:-$SCRATCH/screenshot.png} \
  "$NODE24" "$EXT/test/e2e.mjs"
