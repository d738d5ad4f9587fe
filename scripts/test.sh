#!/usr/bin/env bash
# Runs every check and test of redfence: gofmt, go vet and the race-enabled
# test suites of all modules. Needs Redis (REDIS_ADDR, default 127.0.0.1:6379)
# and MySQL/MariaDB (MYSQL_DSN, default root@tcp(127.0.0.1:3306)/), and
# redis-server on PATH for the replication and failover tests.
set -euo pipefail
cd "$(dirname "$0")/.."

modules=(. chaos compose)

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

for m in "${modules[@]}"; do
	[ -f "$m/go.mod" ] || continue
	echo "== go vet ($m)"
	(cd "$m" && go vet ./...)
done

for m in "${modules[@]}"; do
	[ -f "$m/go.mod" ] || continue
	echo "== go test -race ($m)"
	(cd "$m" && go test -race -count=1 -timeout 8m ./...)
done
