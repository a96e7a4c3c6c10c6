#!/usr/bin/env bash
# Browser tests drive Debian's chromium through Playwright (executable_path); install it if missing.
set -eu
if [[ ! -x /usr/bin/chromium ]]; then
  echo "chromium: installing Debian's package"
  if [[ $(id -u) == 0 ]]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
/usr/bin/chromium --version
