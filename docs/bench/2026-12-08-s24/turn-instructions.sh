#!/bin/bash
# turn-instructions.sh NAME WORKLOAD [redis-server args...]
#
# Counts the Redis server's instructions per turn of a TestTurnInstructions
# workload (chat, growing, truncate, stream): a redis-server under
# callgrind, counting from processCommand, runs 100 and then 300 turns
# (each after a FLUSHALL and the test's seeding), and the difference over
# the 200 extra turns is printed, so that setup cancels. Deterministic to
# about 1 % (the Lua garbage collector's steps fall differently); run it
# from the repository's root. Needs valgrind and redis-server; profiles go
# to /tmp/cg_NAME.out.*, for callgrind_annotate.
set -euo pipefail
name=$1 wl=$2
shift 2
port=$((6400 + RANDOM % 500))
rm -f /tmp/cg_"$name".out*
valgrind --tool=callgrind --callgrind-out-file=/tmp/cg_"$name".out --toggle-collect=processCommand \
  redis-server --port "$port" --save '' --appendonly no "$@" >/tmp/cg_"$name".log 2>&1 &
pid=$!
for _ in $(seq 1 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.3; done
for n in 100 300; do
  callgrind_control -z "$pid" >/dev/null
  redis-cli -p "$port" flushall >/dev/null
  CHRONICLE_TURNS_URL=redis://127.0.0.1:$port/0 CHRONICLE_TURNS=$n CHRONICLE_TURNS_WORKLOAD=$wl \
    go test -run TestTurnInstructions -count 1 ./store/redis/ >/tmp/cg_"$name".test.log
  callgrind_control -d "turns$n" "$pid" >/dev/null
done
redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
wait "$pid" || true
total() { callgrind_annotate "$1" | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'; }
a=$(total /tmp/cg_"$name".out.1)
b=$(total /tmp/cg_"$name".out.2)
echo "$name $wl: $(((b - a) / 200)) instructions a turn"
