#!/usr/bin/env bash
# Browser tests drive Debian's chromium through Playwright (executable_path); install it if missing.
# Two runs at once (two clones on one machine) would race for apt's lock: the install is serialised
# by a lock file, and whoever gets it second finds chromium installed.
set -eu
if [[ ! -x /usr/bin/chromium ]]; then
  if [[ $(id -u) == 0 ]]; then SUDO=""; else SUDO="sudo"; fi
  exec 9>"${TMPDIR:-/tmp}/alann-chromium-install.lock"
  flock 9
  if [[ ! -x /usr/bin/chromium ]]; then
    echo "chromium: installing Debian's package"
    $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq chromium >/dev/null
  fi
  flock -u 9
fi
/usr/bin/chromium --version
