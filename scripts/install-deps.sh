#!/bin/sh
# Installs the Debian packages and Go modules shoal needs, skipping what is
# already there. Usage: scripts/install-deps.sh [run|test|bench]
#   run   - what the daemon needs to run containers
#   test  - plus every program a test runs (default), the benchmark
#           suites' baselines and tools among them: `go test ./...` runs
#           their quick tests
#   bench - plus what only `make bench` needs
# internal/project's TestTestToolsAreInstalled checks that test_pkgs holds
# the package of every program the Go sources run.
set -eu
what="${1:-test}"

run_pkgs="gcc libc6-dev runc crun containernetworking-plugins iptables kmod busybox-static ca-certificates e2fsprogs"
test_pkgs="$run_pkgs nftables etcd-server etcd-client umoci skopeo mmdebstrap docker-registry jq podman chromium iproute2 systemd nginx apache2-utils wrk nghttp2-client sqlite3 sysbench xz-utils"
bench_pkgs="$test_pkgs"

case "$what" in
run) pkgs="$run_pkgs" ;;
test) pkgs="$test_pkgs" ;;
bench) pkgs="$bench_pkgs" ;;
*) echo "usage: $0 [run|test|bench]" >&2; exit 2 ;;
esac

if [ "$(id -u)" != 0 ]; then
	echo "install-deps: must run as root (it installs Debian packages)" >&2
	exit 1
fi

missing=""
for p in $pkgs; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done
if [ -n "$missing" ]; then
	echo "install-deps: installing Debian packages:$missing"
	export DEBIAN_FRONTEND=noninteractive
	# Services in these packages (nginx, docker-registry) must not
	# start on install: the tests and benchmarks start their own copies.
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
		chmod +x /usr/sbin/policy-rc.d
		trap 'rm -f /usr/sbin/policy-rc.d' EXIT
	fi
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# Go: the version go.mod names, from the Go module proxy's toolchain module
# when the machine has no Go or one too old to fetch toolchains itself.
need_go=$(sed -n 's/^go \([0-9.]*\).*/\1/p' go.mod)
have_go=$(go env GOVERSION 2>/dev/null | sed 's/^go//') || have_go=""
if [ -z "$have_go" ] || [ "$(printf '%s\n%s\n' 1.21 "$have_go" | sort -V | head -1)" != 1.21 ]; then
	echo "install-deps: installing Go $need_go from the Go module proxy"
	for p in curl unzip ca-certificates; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			{ DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" >/dev/null; }
	done
	mod="v0.0.1-go$need_go.linux-$(dpkg --print-architecture)"
	tmp=$(mktemp -d)
	curl -fsSL -o "$tmp/go.zip" "https://proxy.golang.org/golang.org/toolchain/@v/$mod.zip"
	rm -rf /usr/local/lib/shoal-go
	mkdir -p /usr/local/lib/shoal-go
	unzip -q "$tmp/go.zip" -d "$tmp"
	mv "$tmp/golang.org/toolchain@$mod"/* /usr/local/lib/shoal-go/
	chmod +x /usr/local/lib/shoal-go/bin/* /usr/local/lib/shoal-go/pkg/tool/*/* 2>/dev/null || true
	ln -sf /usr/local/lib/shoal-go/bin/go /usr/local/lib/shoal-go/bin/gofmt /usr/local/bin/
	rm -rf "$tmp"
fi
# A Go of 1.21 or later fetches the exact toolchain go.mod names by itself.
GOTOOLCHAIN="${GOTOOLCHAIN:-auto}" go mod download
