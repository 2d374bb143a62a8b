#!/usr/bin/env bash
# Installs the server binaries that lockgate's tests start through
# internal/testenv: redis-server, etcd (Debian package etcd-server) and the
# PostgreSQL server binaries (package postgresql, under
# /usr/lib/postgresql/*/bin), and Chromium, in which the bench tests render
# their HTML report headless and the console's tests drive the web console
# (chromedp), and Firefox (package firefox-esr), in which they check the
# console works too (WebDriver BiDi), libfaketime (package faketime), which
# shifts PostgreSQL's clock in the tests and the chaos bench, and ZooKeeper
# (package zookeeper, 3.8: jars under /usr/share/java, run with the Java
# runtime it depends on), which the tests and the bench start as ensembles
# of `java ... QuorumPeerMain` processes for the go-zookeeper lock recipe.
# ZooKeeper counts as present when its jar is, not its service. For the
# client conformance harness (clients/, TestClients) it installs Node.js
# and npm (packages nodejs, npm), which build and test clients/js — its npm
# packages come from clients/js's lockfile through `npm ci`, run by the
# harness itself — and the Python client's one dependency for
# /usr/bin/python3 (package python3-websockets). For the tests of the
# Prometheus alerting rules under deploy/prometheus it installs promtool
# (package prometheus; Debian may start the Prometheus server it ships,
# which no test needs), and for the tests of the systemd unit under
# deploy/systemd systemd-analyze (package systemd; only the tool is used,
# no systemd needs to run) and strace (package strace), which records the
# system calls of a node to check them against the unit's filter. Installs
# only what is missing; uses sudo when not root. Exits non-zero, naming the
# package, if something cannot be had.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
pg_ok() { compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null && compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; }
pg_ok || missing+=(postgresql)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v firefox-esr >/dev/null 2>&1 || missing+=(firefox-esr)
ft_ok() { compgen -G '/usr/lib/*/faketime/libfaketime.so.1' >/dev/null; }
ft_ok || missing+=(faketime)
zk_ok() { [ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null 2>&1; }
zk_ok || missing+=(zookeeper)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
ws_ok() { [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import websockets' >/dev/null 2>&1; }
ws_ok || missing+=(python3-websockets)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
command -v strace >/dev/null 2>&1 || missing+=(strace)

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: redis-server, etcd, PostgreSQL binaries, chromium, firefox-esr, libfaketime, ZooKeeper, node, npm, python3-websockets, promtool, systemd-analyze and strace present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo -n"; else
    echo "deps: missing ${missing[*]} and not root (no sudo): install them with apt-get" >&2
    exit 1
  fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "deps: missing ${missing[*]} and no apt-get on this machine: install them by hand" >&2
  exit 1
fi

echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Try without refreshing the package lists first (fast, works offline from a
# warm cache); refresh and retry if that fails.
if ! $sudo apt-get install -y --no-install-recommends "${missing[@]}"; then
  $sudo apt-get update
  $sudo apt-get install -y --no-install-recommends "${missing[@]}"
fi

# Debian starts the packaged services on install where it can (not
# ZooKeeper's: its package ships no enabled service); the tests start their
# own servers on free ports and need none of them.
command -v redis-server >/dev/null || { echo "deps: redis-server still missing" >&2; exit 1; }
command -v etcd >/dev/null || { echo "deps: etcd still missing (package etcd-server)" >&2; exit 1; }
pg_ok || { echo "deps: PostgreSQL binaries still missing under /usr/lib/postgresql/*/bin" >&2; exit 1; }
command -v chromium >/dev/null || { echo "deps: chromium still missing" >&2; exit 1; }
command -v firefox-esr >/dev/null || { echo "deps: firefox-esr still missing" >&2; exit 1; }
ft_ok || { echo "deps: libfaketime still missing (package faketime)" >&2; exit 1; }
zk_ok || { echo "deps: ZooKeeper still missing (package zookeeper: /usr/share/java/zookeeper.jar and java)" >&2; exit 1; }
command -v node >/dev/null || { echo "deps: node still missing (package nodejs)" >&2; exit 1; }
command -v npm >/dev/null || { echo "deps: npm still missing (package npm)" >&2; exit 1; }
ws_ok || { echo "deps: /usr/bin/python3 still cannot import websockets (package python3-websockets)" >&2; exit 1; }
command -v promtool >/dev/null || { echo "deps: promtool still missing (package prometheus)" >&2; exit 1; }
command -v systemd-analyze >/dev/null || { echo "deps: systemd-analyze still missing (package systemd)" >&2; exit 1; }
command -v strace >/dev/null || { echo "deps: strace still missing (package strace)" >&2; exit 1; }
echo "deps: done"
