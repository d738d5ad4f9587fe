#!/usr/bin/env bash
# Runs every check and test of redfence: gofmt, go mod tidy -diff, go vet and
# the race-enabled test suites of all modules. Needs Redis (REDIS_ADDR,
# default 127.0.0.1:6379) and MySQL/MariaDB (MYSQL_DSN, default
# root@tcp(127.0.0.1:3306)/), and redis-server on PATH for the replication and
# failover tests.
set -euo pipefail
cd "$(dirname "$0")/.."

modules=(. chaos compose extra/redfenceotel bench/lockpeer)

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

# Every module, the ones not tested below included: go.mod must list what the
# code imports (direct dependencies not marked indirect) and go.sum must be
# complete, or users of the module get a different build than CI.
echo "== go mod tidy -diff"
untidy=0
while IFS= read -r gomod; do
	d=$(dirname "$gomod")
	if ! out=$(cd "$d" && go mod tidy -diff 2>&1); then
		echo "go mod tidy would change $d (run: cd $d && go mod tidy):"; echo "$out"; untidy=1
	fi
done < <(find . -name go.mod -not -path './.git/*' -not -path '*/testdata/*' | sort)
[ "$untidy" = 0 ] || exit 1

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
