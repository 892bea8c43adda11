#!/usr/bin/env bash
# Installs the Node.js port's dependencies (ports/node) from its lockfile, for the
# driver tests (tests/kit/test_driver.py, tests/kit/test_clock.py). Needs node >= 20 and npm;
# installs Debian's nodejs/npm only when node is missing altogether. `npm ci` installs
# exactly the lockfile's tree (a few seconds once npm's cache is warm).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../ports/node"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "install-node-port.sh: node or npm missing; installing Debian's nodejs and npm"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
    echo "install-node-port.sh: the Node.js port needs node >= 20, found $(node --version)" >&2
    exit 1
fi

npm ci --no-audit --no-fund --loglevel=error
