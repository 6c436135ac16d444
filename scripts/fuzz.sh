#!/usr/bin/env bash
# make fuzz: run every fuzz target (every `func FuzzX` in a _test.go file)
# for a fixed time each and print executions and crashers per target.
#   FUZZTIME=20s   time per target (go test -fuzztime)
# A crasher is written by go test to <pkg>/testdata/fuzz/<Target>/ and
# becomes a regression case of the ordinary `go test` run once committed;
# the script exits 1 if any target found one, or failed for another reason.
# Go 1.26's fuzz coordinator can fail a target with a bare "context
# deadline exceeded" when -fuzztime ends under CPU contention
# (go.dev/issue/75804, fixed in Go 1.27): with no crasher written that is
# reported as such, not as a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-20s}

targets=$(grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r f; do
	for name in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | cut -d' ' -f2); do
		echo "$(dirname "$f") $name"
	done
done)

printf '%-26s %-28s %12s %9s\n' PACKAGE TARGET EXECUTIONS CRASHERS
failed=0
while read -r dir name; do
	[ -n "$dir" ] || continue
	log=$(mktemp)
	before=$(ls "$dir/testdata/fuzz/$name" 2>/dev/null | wc -l)
	go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "$dir" >"$log" 2>&1
	rc=$?
	after=$(ls "$dir/testdata/fuzz/$name" 2>/dev/null | wc -l)
	execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
	crashers=$((after - before))
	note=""
	if [ "$rc" -ne 0 ] && [ "$crashers" -eq 0 ] && grep -q '^    context deadline exceeded$' "$log" && ! grep -q -- '--- FAIL: .*/' "$log"; then
		note="  (stopped by go.dev/issue/75804 at the deadline, no crasher)"
		rc=0
	fi
	printf '%-26s %-28s %12s %9s%s\n' "${dir#./}" "$name" "${execs:-?}" "$crashers" "$note"
	if [ "$rc" -ne 0 ] || [ "$crashers" -gt 0 ]; then
		failed=1
		sed 's/^/    /' "$log" | grep -v '^    fuzz: elapsed' | tail -20
	fi
	rm -f "$log"
done <<<"$targets"
exit $failed
