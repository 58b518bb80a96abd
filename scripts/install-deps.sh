#!/bin/sh
# Installs the Debian packages and Go modules shoal needs, skipping what is
# already there. Usage: scripts/install-deps.sh [run|test|bench]
#   run   - what the daemon needs to run containers
#   test  - plus what the tests need (default)
#   bench - plus the baselines and tools of `make bench`
set -eu
what="${1:-test}"

run_pkgs="runc crun containernetworking-plugins iptables busybox-static ca-certificates"
test_pkgs="$run_pkgs etcd-server etcd-client umoci skopeo docker-registry jq podman"
bench_pkgs="$test_pkgs nginx apache2-utils wrk sqlite3 sysbench hyperfine xz-utils lighttpd"

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
	# Services in these packages (nginx, lighttpd, docker-registry) must not
	# start on install: the tests and benchmarks start their own copies.
	printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
	chmod +x /usr/sbin/policy-rc.d
	trap 'rm -f /usr/sbin/policy-rc.d' EXIT
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

if ! command -v go >/dev/null 2>&1; then
	echo "install-deps: Go is not installed (need Go >= 1.24 on PATH)" >&2
	exit 1
fi
go mod download
