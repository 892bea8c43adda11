#!/usr/bin/env bash
# The project's test command: bash scripts/test.sh [pytest args...]
# Installs what is missing (servers, luacheck, .venv), lints the Lua scripts, runs pytest.
# With no args pytest runs the whole suite (testpaths in pyproject.toml). pytest's exit
# code 5 (no tests collected) is turned into a failure: a run that tests nothing is red.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

have() { command -v "$1" >/dev/null 2>&1; }

if ! have valkey-server || ! have valkey-cli || ! have redis-server || ! have luacheck || ! have chromium; then
    echo "test.sh: valkey-server, valkey-cli, redis-server, luacheck or chromium missing; running scripts/install-valkey.sh"
    bash scripts/install-valkey.sh
fi

if [ ! -x .venv/bin/python ]; then
    echo "test.sh: creating .venv"
    "${PYTHON:-python3}" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
bash scripts/install-node-port.sh

if [ -n "$(find emq_live/lua -name '*.lua' -print -quit 2>/dev/null)" ]; then
    luacheck --no-color emq_live/lua
else
    echo "test.sh: note: no .lua files under emq_live/lua; luacheck skipped"
fi

rc=0
.venv/bin/python -m pytest "$@" || rc=$?
if [ "$rc" -eq 5 ]; then
    echo "test.sh: pytest collected no tests (exit 5); failing the run" >&2
    exit 1
fi
exit "$rc"
