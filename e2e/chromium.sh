#!/usr/bin/env bash
# Debian's Chromium for the plan page's browser test (e2e/test_shadow.py), installed with
# apt-get when missing: a new machine has none. `make test` and `make test-e2e` run this
# first; it fails loudly, with the command to run, when it cannot install.
set -euo pipefail
command -v chromium >/dev/null 2>&1 && exit 0
sudo=()
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
  else
    echo "make test needs Debian's chromium for the plan page's browser test and cannot" \
         "install it without root: run 'sudo apt-get install -y chromium', then again" >&2
    exit 1
  fi
fi
echo "installing Debian's chromium for the plan page's browser test (apt-get install chromium)"
if ! { "${sudo[@]}" apt-get update -qq \
       && DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq chromium >/dev/null; } \
   || ! command -v chromium >/dev/null 2>&1; then
  echo "could not install chromium (apt-get install -y chromium)" >&2
  exit 1
fi
