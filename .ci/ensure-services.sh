#!/usr/bin/env bash
# Checks that Redis, RabbitMQ, PostgreSQL and MariaDB answer on loopback and
# starts them with the machine's own commands when they don't. Tests never use
# any other host. The database tests expect PostgreSQL with trust auth and
# MariaDB with root and an empty password, each with a database named `test`.
set -uo pipefail

answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_for() {
  local port=$1 name=$2
  for _ in $(seq 1 60); do
    answers "$port" && { echo "$name answers on 127.0.0.1:$port"; return 0; }
    sleep 1
  done
  echo "$name did not come up on 127.0.0.1:$port" >&2
  return 1
}

if ! answers 6379; then
  echo "starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
fi
if ! answers 5672; then
  echo "starting RabbitMQ"
  rabbitmq-server -detached || true
fi
if ! answers 5432; then
  echo "starting PostgreSQL"
  for version in $(ls /etc/postgresql 2>/dev/null); do
    pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  done
fi
if ! answers 3306; then
  echo "starting MariaDB"
  mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd || true
fi
# Every one must answer: without -e, a failure of one would otherwise be masked by the next.
status=0
wait_for 6379 Redis || status=1
wait_for 5672 RabbitMQ || status=1
wait_for 5432 PostgreSQL || status=1
wait_for 3306 MariaDB || status=1
# A freshly installed Debian server asks loopback clients for a password (PostgreSQL) or
# lets root in only over the Unix socket (MariaDB). The tests log in over loopback with trust
# auth and an empty root password, as this machine kind's servers are set up: make a fresh
# install match, through the local socket, only when the loopback login does not work yet.
pg_login() { PGCONNECT_TIMEOUT=5 psql -w -h 127.0.0.1 -U postgres -d postgres -tAc 'SELECT 1' >/dev/null 2>&1; }
if [ "$status" -eq 0 ] && ! pg_login; then
  echo "PostgreSQL: trusting loopback connections (fresh install)"
  hba=$(runuser -u postgres -- psql -tAc 'SHOW hba_file' 2>/dev/null || true)
  if [ -n "$hba" ] && [ -f "$hba" ]; then
    sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
    runuser -u postgres -- psql -tAc 'SELECT pg_reload_conf()' >/dev/null || true
  fi
  pg_login || { echo "PostgreSQL does not accept trust logins on 127.0.0.1" >&2; status=1; }
fi
maria_login() { mariadb --connect-timeout=5 -h 127.0.0.1 -uroot -e 'SELECT 1' >/dev/null 2>&1; }
if [ "$status" -eq 0 ] && ! maria_login; then
  echo "MariaDB: root with an empty password over TCP (fresh install)"
  mariadb -uroot -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD(''); FLUSH PRIVILEGES" || true
  maria_login || { echo "MariaDB does not let root in over 127.0.0.1 with an empty password" >&2; status=1; }
fi
# The database the tests use, if the server came up without it.
if [ "$status" -eq 0 ]; then
  psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'" 2>/dev/null | grep -q 1 ||
    psql -h 127.0.0.1 -U postgres -d postgres -c 'CREATE DATABASE test' || status=1
  mariadb -h 127.0.0.1 -uroot -e 'CREATE DATABASE IF NOT EXISTS test' || status=1
fi
exit "$status"
