#!/usr/bin/env bash
# Install the servers and tools emq's tests use, from Debian's packages:
#   valkey-server + valkey-tools (Valkey 8, from bookworm-backports),
#   redis-server (Debian's Redis 7.0, the second server under test),
#   lua-check (luacheck, lints emq_live/lua),
#   chromium (headless: tests/kit/test_html.py renders the HTML report in it).
# Idempotent: installs only what is missing; adds the bookworm-backports apt source
# (deb822, same mirror and keyring as the Debian entry) only if none exists.
# Runs as root with no tty (uses sudo when not root). The Debian services of packages
# installed here are kept from starting: the tests start their own throwaway servers on
# free loopback ports (emq_kit.server) and never use the default port 6379.
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive

have() { command -v "$1" >/dev/null 2>&1; }
log() { printf 'install-valkey: %s\n' "$*"; }

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if have sudo; then
        SUDO=(sudo --preserve-env=DEBIAN_FRONTEND)
    else
        log "must run as root (or with sudo available)" >&2
        exit 1
    fi
fi
as_root() { "${SUDO[@]}" "$@"; }

need_valkey=0
plain=()  # packages from the release itself (no -t)
{ have valkey-server && have valkey-cli; } || need_valkey=1  # valkey-cli: the cluster tests
have redis-server || plain+=(redis-server)
have luacheck || plain+=(lua-check)
have chromium || plain+=(chromium)

if [ "$need_valkey" -eq 0 ] && [ "${#plain[@]}" -eq 0 ]; then
    log "valkey-server, valkey-cli, redis-server, luacheck and chromium are installed; nothing to do"
    exit 0
fi

if ! have apt-get; then
    log "apt-get not found: install valkey-server (8.x), redis-server, luacheck and chromium by hand" >&2
    exit 1
fi

codename=""
if [ -r /etc/os-release ]; then
    # shellcheck disable=SC1091
    codename="$(. /etc/os-release && printf '%s' "${VERSION_CODENAME:-}")"
fi

# Valkey 8 is in bookworm-backports; later Debian releases carry it in main.
backports=""
if [ "$need_valkey" -eq 1 ] && [ "$codename" = "bookworm" ]; then
    backports="bookworm-backports"
    if grep -Rqs -- "$backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
        log "an apt source for $backports exists"
    else
        # Mirror the URIs and Signed-By of the Debian entry (the stanza whose Suites
        # include plain "bookworm") in the deb822 sources; fall back to Debian's defaults.
        uris=""
        signed_by=""
        for f in /etc/apt/sources.list.d/*.sources; do
            [ -r "$f" ] || continue
            IFS=$'\t' read -r uris signed_by < <(awk '
                function flush() {
                    if (!done && suites ~ /(^|[ \t])bookworm([ \t]|$)/ && uri != "") {
                        print uri "\t" signed; done = 1
                    }
                    suites = ""; uri = ""; signed = ""
                }
                /^[ \t]*$/ { flush(); next }
                /^[ \t]*#/ { next }
                tolower($1) == "suites:" { sub(/^[^:]*:[ \t]*/, ""); suites = $0 }
                tolower($1) == "uris:" { uri = $2 }
                tolower($1) == "signed-by:" { signed = $2 }
                END { flush() }
            ' "$f") || true
            if [ -n "$uris" ]; then
                log "mirroring the Debian entry in $f"
                break
            fi
        done
        uris="${uris:-http://deb.debian.org/debian}"
        signed_by="${signed_by:-/usr/share/keyrings/debian-archive-keyring.gpg}"
        log "adding /etc/apt/sources.list.d/backports.sources ($uris $backports)"
        printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n' \
            "$uris" "$backports" "$signed_by" | as_root tee /etc/apt/sources.list.d/backports.sources >/dev/null
    fi
fi

# Keep the packages' init scripts from starting services during the install: a
# policy-rc.d that forbids every action (only if the machine has none of its own).
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# temporary, from emq scripts/install-valkey.sh\nexit 101\n' | as_root tee "$policy" >/dev/null
    as_root chmod 755 "$policy"
    made_policy=1
fi
cleanup() { if [ "$made_policy" -eq 1 ]; then as_root rm -f "$policy"; fi; }
trap cleanup EXIT

apt_install() {
    as_root apt-get install -y -q --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@"
}

log "apt-get update"
as_root apt-get update -q

installed=()
if [ "$need_valkey" -eq 1 ]; then
    if [ -n "$backports" ]; then
        log "installing valkey-server valkey-tools from $backports"
        apt_install -t "$backports" valkey-server valkey-tools
    else
        log "installing valkey-server valkey-tools"
        apt_install valkey-server valkey-tools
    fi
    installed+=(valkey-server)
fi
if [ "${#plain[@]}" -gt 0 ]; then
    log "installing ${plain[*]}"
    apt_install "${plain[@]}"
    for p in "${plain[@]}"; do
        [ "$p" = redis-server ] && installed+=(redis-server)
    done
fi

# A service this script installed must not stay running (or start at boot).
for svc in ${installed[@]+"${installed[@]}"}; do
    if [ -d /run/systemd/system ] && have systemctl; then
        as_root systemctl disable --now "$svc" >/dev/null 2>&1 || true
    elif [ -x "/etc/init.d/$svc" ]; then
        as_root "/etc/init.d/$svc" stop >/dev/null 2>&1 || true
    fi
done

for cmd in valkey-server redis-server luacheck chromium; do
    if ! have "$cmd"; then
        log "$cmd is still missing after the install" >&2
        exit 1
    fi
done
log "valkey-server $(valkey-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p'), redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p'), luacheck $(luacheck --version | sed -n 's/^Luacheck: //p')"

if (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then
    log "note: something listens on 127.0.0.1:6379; emq's tests never use the default port"
fi
