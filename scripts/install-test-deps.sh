#!/usr/bin/env bash
# What the test suite needs beyond pip: Debian's chromium, which the dashboard's browser tests
# (tests/test_dashboard.py) drive through Playwright. Playwright never downloads a browser here:
# the tests launch /usr/bin/chromium.
#
# Does nothing when chromium is already installed. Installing needs root (CI runs as root);
# without it this says what to run and exits 0, and the browser tests then skip, naming this
# script (under CI=true they fail instead: a CI run must not pass without them).
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
packages=(chromium fonts-dejavu-core)
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        apt=(sudo -n apt-get)
    else
        echo "install-test-deps: chromium is missing and installing it needs root:" >&2
        echo "  sudo apt-get install -y --no-install-recommends ${packages[*]}" >&2
        echo "install-test-deps: the dashboard's browser tests will be skipped" >&2
        exit 0
    fi
else
    apt=(apt-get)
fi
echo "install-test-deps: installing ${packages[*]} (for the dashboard's browser tests)"
export DEBIAN_FRONTEND=noninteractive
"${apt[@]}" update -qq
"${apt[@]}" install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
command -v chromium >/dev/null
