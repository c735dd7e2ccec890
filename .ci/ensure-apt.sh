#!/usr/bin/env bash
# Installs the Debian packages some tests drive as real programs:
#   prometheus      promtool (alert rule unit tests) and the server (end-to-end alert check)
#   chromium        headless rendering of the lineage timeline page
#   docker-compose  `docker-compose config` validation of docker-compose.yml (no engine needed)
#   redis-server, rabbitmq-server  the brokers the queue tests use (ensure-services.sh starts them)
#   redis-tools     redis-cli, which a database test runs (redis-server depends on it; checked on its own)
#   postgresql, mariadb-server     the databases the database tests use (ensure-services.sh starts them)
# Returns at once when every command is already on PATH.
set -euo pipefail

need=()
command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
# redis-cli: test/db/driver-instrumentations.ts reads CLIENT LIST with it.
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
[ -x /usr/sbin/rabbitmq-server ] || command -v rabbitmq-server >/dev/null 2>&1 || need+=(rabbitmq-server)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)
[ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)

if [ "${#need[@]}" -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
echo "ensure-apt: installing ${need[*]}"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
