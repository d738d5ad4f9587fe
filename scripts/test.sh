#!/usr/bin/env bash
# Runs every check and test of redfence: gofmt, checks of the README and the
# module files, go mod tidy -diff, go vet and the race-enabled test suites of
# all modules. Needs Go (the version in go.mod), Redis (REDIS_ADDR, default
# 127.0.0.1:6379) and MySQL/MariaDB (MYSQL_DSN, default
# root@tcp(127.0.0.1:3306)/), redis-server on PATH for the replication and
# failover tests, and mariadbd, the galera-4 provider and rsync for the
# Galera tests; see the README's "Running the tests".
set -euo pipefail
cd "$(dirname "$0")/.."

modules=(. chaos compose extra/redfenceotel bench/lockpeer)

# go.work joins the modules for development, raising a dependency they share
# to the highest version any of them requires. Build each module as its own
# go.mod says instead: that is the build its users get.
export GOWORK=off

fail() { echo "$*"; exit 1; }

echo "== README"
# The README opens with the two commands a newcomer runs; .ci/run runs the
# test command, and the README must name that same command, the Go version
# go.mod asks for and every module this script tests.
ci_cmd=$(sed -n 's/^exec //p' .ci/run)
[ -n "$ci_cmd" ] || fail ".ci/run: no 'exec <test command>' line found"
first_block=$(awk '/^```/{n++; next} n==1' README.md)
grep -qE "^${ci_cmd//./\.}( |$)" <<<"$first_block" ||
	fail "README.md: the first code block does not start a line with the test command .ci/run runs: $ci_cmd"
grep -qE '^go run \./examples/inventory( |$)' <<<"$first_block" ||
	fail "README.md: the first code block does not start a line with: go run ./examples/inventory"
go_version=$(sed -n 's/^go \([0-9]*\.[0-9]*\).*/\1/p' go.mod)
grep -q "Go $go_version" README.md || fail "README.md does not name Go $go_version, the version go.mod asks for"
for m in "${modules[@]}"; do
	[ "$m" = . ] || grep -q "\`$m/\`" README.md || fail "README.md does not name the module $m/ that this script tests"
done

# The README's "Use" example tells apart the outcomes a caller must handle
# differently (see guard's package documentation), and compiles against the
# packages of this checkout.
use_example=$(awk '/^## Use$/{u=1} u&&/^```go$/{c=1; next} c&&/^```$/{exit} c' README.md)
for e in guard.ErrFenced guard.ErrNotCommitted guard.ErrOutcomeUnknown; do
	grep -q "$e" <<<"$use_example" || fail "README.md: the Go example under \"## Use\" does not name $e"
done
use_dir=$(mktemp -d ./.readme-use.XXXXXX)
{
	cat <<-'EOF'
	package readme

	import (
		"context"
		"errors"
		"fmt"

		"github.com/jmoiron/sqlx"
		"github.com/redis/go-redis/v9"

		"github.com/redfence/redfence/guard"
		"github.com/redfence/redfence/migrations"
		"github.com/redfence/redfence/redislock"
	)

	var ErrSoldOut = errors.New("sold out")

	func use(ctx context.Context, redisClient *redis.Client, db *sqlx.DB) error {
	EOF
	echo "$use_example"
	printf '\treturn err\n}\n'
} >"$use_dir/use.go"
if ! out=$(go vet "$use_dir" 2>&1); then
	rm -rf "$use_dir"
	fail "README.md: the Go example under \"## Use\" does not compile:"$'\n'"$out"
fi
rm -rf "$use_dir"

echo "== go.work"
# Every module is in the workspace, so that a command run anywhere in the
# checkout builds against the modules here.
want=$(find . -name go.mod -not -path './.git/*' -not -path '*/testdata/*' | sed 's|/go\.mod$||' | sort)
have=$(go work edit -json go.work | sed -n 's/.*"DiskPath": "\(.*\)".*/\1/p' | sort)
[ "$want" = "$have" ] || fail "go.work does not use exactly the modules of the checkout; want:"$'\n'"$want"$'\n'"have:"$'\n'"$have"

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

# A published module of its own (extra/...) requires the core at the version
# its users will download, while the replace in its go.mod builds it here
# against the checkout. So the version must be a tag or a pseudo-version of a
# commit of this repository, and the module must build (tests included)
# against the core as of that commit.
for m in extra/redfenceotel; do
	echo "== core version required by $m"
	core=github.com/redfence/redfence
	v=$(cd "$m" && go list -m -f '{{.Version}}' "$core")
	if [[ $v =~ ([0-9]{14})-([0-9a-f]{12})$ ]]; then
		stamp=${BASH_REMATCH[1]}
		rev=$(git rev-parse -q --verify "${BASH_REMATCH[2]}^{commit}") ||
			fail "$m/go.mod requires $core $v: no commit ${BASH_REMATCH[2]} in this repository"
		at=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S "$rev")
		[ "$stamp" = "$at" ] || fail "$m/go.mod requires $core $v: commit ${rev:0:12} is of $at, not $stamp"
		if [[ $v == v0.0.0-* ]] && tag=$(git describe --tags --abbrev=0 --match 'v[0-9]*' "$rev" 2>/dev/null); then
			fail "$m/go.mod requires $core $v, but $tag precedes that commit: use a tag or a pseudo-version based on it"
		fi
	else
		rev=$(git rev-parse -q --verify "refs/tags/$v^{commit}") ||
			fail "$m/go.mod requires $core $v: neither a tag of this repository nor a pseudo-version of one of its commits"
	fi
	tmp=$(mktemp -d)
	mkdir "$tmp/core"
	git archive "$rev" | tar -x -C "$tmp/core"
	cp -R "$m" "$tmp/mod"
	if ! (cd "$tmp/mod" && go mod edit -replace "$core=$tmp/core" && GOFLAGS="${GOFLAGS:-} -mod=mod" go vet ./...); then
		rm -rf "$tmp"
		fail "$m does not build with $core $v, the version its go.mod requires (commit ${rev:0:12}): require a newer one"
	fi
	rm -rf "$tmp"
done

for m in "${modules[@]}"; do
	[ -f "$m/go.mod" ] || continue
	echo "== go test -race ($m)"
	(cd "$m" && go test -race -count=1 -timeout 8m ./...)
done
