#!/usr/bin/env bash
# Installs (or names) the Debian packages zerotrain needs to build and test.
# Run as root: installs with apt-get. Otherwise: prints the exact command and stops.
set -euo pipefail
pkgs=(build-essential cmake libopenblas-openmp-dev libopenmpi-dev openmpi-bin)
# as root, the tests across hosts run (label hosts): their network faults need iptables
# (delay and loss: tests/hosts/hosts_lib.sh's hosts_netem; without it they are skipped)
[ "$(id -u)" -eq 0 ] && pkgs+=(iptables)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "setup: missing Debian packages: ${missing[*]}" >&2
  echo "setup: run:  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
