#!/bin/sh
# metrics.sh prints, as markdown, the figures that track the shape of the code:
# methods per type, files per package, the most complex functions, serving's
# imports and the length of DESIGN.md. Run it from the module root:
#   scripts/metrics.sh > metrics.md
# Cyclomatic complexity needs gocyclo
# (go install github.com/fzipp/gocyclo/cmd/gocyclo@latest).
set -eu
cd "$(dirname "$0")/.."
GOCYCLO=${GOCYCLO:-$(command -v gocyclo || echo "$(go env GOPATH)/bin/gocyclo")}

# sources lists a package's non-test Go files.
sources() { ls internal/"$1"/*.go 2>/dev/null | grep -v '_test\.go$' || true; }

# methods prints "count type" for every method receiver type in package $1.
methods() {
	files=$(sources "$1")
	[ -n "$files" ] || return 0
	grep -hoE '^func \([A-Za-z_]+ \*?[A-Za-z_]+(\[[^]]*\])?\)' $files |
		sed -E 's/^func \([A-Za-z_]+ \*?([A-Za-z_]+).*/\1/' | sort | uniq -c | sort -rn
}

echo "# Code metrics at $(git rev-parse --short HEAD) ($(date -u '+%Y-%m-%d %H:%M UTC'))"
echo
echo "## Methods per type (non-test files)"
echo
echo "Named types (0 = the type no longer exists):"
echo
echo '| package.type | methods |'
echo '|---|---|'
for pt in serving.appCtl serving.appState serving.driver serving.Manager serving.localNode serving.dispatcher dispatch.Dispatcher \
	jobs.Manager jobs.Sandbox sandbox.Sandbox jobs.Scheduler proxy.Proxy proxy.fastReq proxy.table proxy.cconn proxy.pool; do
	p=${pt%%.*} t=${pt#*.}
	n=$(methods "$p" | awk -v t="$t" '$2 == t { print $1 }')
	echo "| $pt | ${n:-0} |"
done
echo
echo "Top 6 types by methods in each package:"
echo
for p in serving jobs sandbox proxy agent cluster daemon routes node localnode dispatch; do
	[ -d internal/$p ] || continue
	echo "- $p: $(methods $p | head -6 | awk '{ printf "%s%s %s", sep, $2, $1; sep = ", " }')"
done
echo
echo "## Files per package"
echo
echo '| package | files | test files | lines (non-test) |'
echo '|---|---|---|---|'
for p in serving jobs sandbox proxy agent cluster daemon routes node localnode dispatch labels runtime/wipe; do
	[ -d internal/$p ] || { echo "| $p | - | - | - |"; continue; }
	f=$(sources $p | wc -l)
	tf=$(ls internal/$p/*_test.go 2>/dev/null | wc -l)
	l=$(cat $(sources $p) /dev/null | wc -l)
	echo "| $p | $f | $tf | $l |"
done
echo
echo "Internal packages: $(go list ./internal/... | wc -l)"
echo
echo "## Cyclomatic complexity, top 20 functions in internal/ (non-test)"
echo
echo '```'
"$GOCYCLO" -top 20 -ignore '_test\.go$' internal/
echo '```'
echo
echo "Average over internal/ (non-test): $("$GOCYCLO" -avg -ignore '_test\.go$' internal/ | awk '/^Average/ { print $2 }')"
echo
echo "## Module-internal imports of serving and jobs"
echo
for p in serving jobs; do
	echo "- $p: $(go list -f '{{join .Imports "\n"}}' ./internal/$p | grep '^github.com/shoal-run/shoal/' |
		sed 's|^github.com/shoal-run/shoal/internal/||' | tr '\n' ' ')"
done
echo
echo "## DESIGN.md"
echo
echo "Lines: $(wc -l < DESIGN.md)"
[ -f docs/benchmarks.md ] && echo "docs/benchmarks.md lines: $(wc -l < docs/benchmarks.md)"
exit 0
