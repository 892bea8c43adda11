#!/usr/bin/env bash
# The project's test command: bash scripts/test.sh [--floors] [pytest args...]
# Installs what is missing (servers, luacheck, the venv), lints the Lua scripts and the
# Python (ruff), type-checks emq_model, emq_live and emq_kit (mypy), runs pytest
# in parallel (pytest-xdist, EMQ_TEST_WORKERS workers, default `auto` = one per core; each
# worker starts its own throwaway servers; `--dist worksteal`: a worker that runs dry takes
# tests queued on another, so the slow ones dealt late do not leave a core idle at the end)
# and prints the 15 slowest tests.
# With no args pytest runs the whole suite (testpaths in pyproject.toml).
# --floors: build .venv-floors with every dependency at its floor (constraints/minimum.txt)
# (the campaign extra too) and run the floor tests there (FLOOR_TESTS: the fast ones that
# still run `emq check` against Valkey, and a campaign on Dask), so a floor in
# pyproject.toml that no longer holds turns the run red.
# pytest's exit code 5 (no tests collected) is turned into a failure: a run that tests
# nothing is red.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The last two hold the campaign extra's floor (distributed 2024.1): a campaign on two
# workers, and the nanny environment that floor is set by (CMP-5).
FLOOR_TESTS=(tests/e2e/test_check.py tests/live/test_live.py tests/live/test_scripts.py tests/model/test_spec.py tests/model/test_model.py
             tests/kit/test_campaign.py::test_a_campaign_on_two_workers_combines_its_runs_and_a_restart_replays_its_corpus
             tests/kit/test_campaign.py::test_a_local_clusters_workers_keep_glibcs_own_trimming)

venv=.venv
floors=0
if [ "${1:-}" = "--floors" ]; then
    shift
    venv=.venv-floors
    floors=1
fi

have() { command -v "$1" >/dev/null 2>&1; }

if ! have valkey-server || ! have valkey-cli || ! have redis-server || ! have luacheck || ! have chromium; then
    echo "test.sh: valkey-server, valkey-cli, redis-server, luacheck or chromium missing; running scripts/install-valkey.sh"
    bash scripts/install-valkey.sh
fi

if [ ! -x "$venv/bin/python" ]; then
    echo "test.sh: creating $venv"
    "${PYTHON:-python3}" -m venv "$venv"
fi
if [ "$floors" -eq 1 ]; then
    # -c pins every dependency named there to its floor; pip fails if a floor is unsatisfiable.
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -c constraints/minimum.txt -e '.[test-tools,campaign]'
    echo "test.sh: dependencies at their floors:"
    "$venv/bin/python" -m pip freeze --exclude-editable | grep -iE "^($(cut -d= -f1 constraints/minimum.txt | grep -v '^#' | paste -sd'|'))=="
    [ "$#" -gt 0 ] || set -- "${FLOOR_TESTS[@]}"
else
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -e '.[test]'
    bash scripts/install-node-port.sh
    if [ -n "$(find emq_live/lua -name '*.lua' -print -quit 2>/dev/null)" ]; then
        luacheck --no-color emq_live/lua
    else
        echo "test.sh: note: no .lua files under emq_live/lua; luacheck skipped"
    fi
    # Python: lint (ruff, rules in pyproject.toml) and types (mypy on emq_model, emq_live, emq_kit).
    "$venv/bin/python" -m ruff check .
    "$venv/bin/python" -m mypy
fi

# The kit's bytecode, compiled once: the suite starts `emq` in many subprocesses, and where
# PYTHONDONTWRITEBYTECODE is set each would compile the kit anew (Python still reads a cache).
"$venv/bin/python" -m compileall -q emq_model emq_live emq_kit tests >/dev/null

rc=0
"$venv/bin/python" -m pytest -n "${EMQ_TEST_WORKERS:-auto}" --dist worksteal --durations=15 "$@" || rc=$?
if [ "$rc" -eq 5 ]; then
    echo "test.sh: pytest collected no tests (exit 5); failing the run" >&2
    exit 1
fi
exit "$rc"
