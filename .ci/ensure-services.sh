#!/usr/bin/env bash
# Checks that Redis and RabbitMQ answer on loopback and starts them with the
# machine's own commands when they don't. Tests never use any other host.
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
# Both must answer: without -e, a failure of the first would otherwise be masked by the second.
status=0
wait_for 6379 Redis || status=1
wait_for 5672 RabbitMQ || status=1
exit "$status"
