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
test_pkgs="$run_pkgs curl nftables etcd-server etcd-client umoci skopeo mmdebstrap docker-registry jq podman chromium iproute2 systemd nginx caddy apache2-utils wrk nghttp2-client sqlite3 sysbench mariadb-client xz-utils"
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
		rm_policy=1
		trap 'rm -f /usr/sbin/policy-rc.d' EXIT
	fi
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# CRIU for the checkpoint tier: Debian 12's criu 3.17 fails `criu check` on
# kernels that split the vDSO's vvar (fixed in 4.1), and 4.1 cannot dump a
# TCP socket on kernels >= 6.16 (fixed in 4.2). Unless the host's own criu is
# 4.2 or later and passes `criu check`, CRIU is built from Debian sid's source
# package into $criu_home, which the daemon prefers to criu on $PATH. A
# private apt configuration fetches the source: the host's apt sources stay
# as they are. Nothing is built when $criu_home/criu is already 4.2 or later.
criu_want=4.2.1
criu_home=/usr/local/lib/shoal/criu
criu_build_pkgs="make gcc libc6-dev pkgconf dpkg-dev xz-utils libprotobuf-c-dev protobuf-c-compiler protobuf-compiler libprotobuf-dev libnl-3-dev libnet1-dev libcap-dev libgnutls28-dev libnftables-dev libbsd-dev uuid-dev"
criu_version() { "$1" --version 2>/dev/null | sed -n 's/^Version: *//p'; }
criu_usable() {
	v=$(criu_version "$1")
	[ -n "$v" ] && [ "$(printf '%s\n%s\n' 4.2 "$v" | sort -V | head -1)" = 4.2 ] && "$1" check >/dev/null 2>&1
}
host_criu=$(command -v criu 2>/dev/null || true)
if [ -n "$host_criu" ] && criu_usable "$host_criu"; then
	echo "install-deps: using the host's CRIU $(criu_version "$host_criu") ($host_criu)"
elif [ -x "$criu_home/criu" ] && [ "$(printf '%s\n%s\n' 4.2 "$(criu_version "$criu_home/criu")" | sort -V | head -1)" = 4.2 ]; then
	echo "install-deps: CRIU $(criu_version "$criu_home/criu") already built ($criu_home/criu)"
	"$criu_home/criu" check >/dev/null 2>&1 ||
		echo "install-deps: warning: $criu_home/criu check fails on this host; shoal runs without the checkpoint tier" >&2
else
	echo "install-deps: building CRIU $criu_want from Debian sid's source package into $criu_home (about 3 minutes)"
	missing=""
	for p in $criu_build_pkgs; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
	done
	if [ -n "$missing" ]; then
		echo "install-deps: installing CRIU's build dependencies:$missing"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
	fi
	# /var/tmp, not /tmp: apt's sandbox user writes its temporary files there.
	work=$(mktemp -d /var/tmp/shoal-criu.XXXXXX)
	trap 'rm -rf "$work"; [ -z "${rm_policy:-}" ] || rm -f /usr/sbin/policy-rc.d' EXIT
	chmod 755 "$work"
	mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/apt/sources.list.d" "$work/src"
	echo "deb-src http://deb.debian.org/debian sid main" >"$work/apt/sources.list"
	apt_private="-o Dir::Etc::sourcelist=$work/apt/sources.list -o Dir::Etc::sourceparts=$work/apt/sources.list.d
		-o Dir::State::Lists=$work/apt/lists -o Dir::Cache=$work/apt/cache -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache="
	echo "install-deps: CRIU: fetching Debian sid's source index"
	TMPDIR=/var/tmp apt-get $apt_private update -qq
	echo "install-deps: CRIU: fetching criu $criu_want's source package"
	# criu_want when sid still has it, else sid's newest.
	v=$(apt-cache $apt_private showsrc criu | sed -n "s/^Version: \($criu_want-.*\)/\1/p" | head -1)
	# The upstream tarball (the .orig of the source package) is what is
	# built: Debian's packaging tarball is not on every mirror, and
	# `make criu` needs none of it. apt checks what it fetches against the
	# signed index; the tarball is checked against the .dsc here too.
	(cd "$work/src" && TMPDIR=/var/tmp apt-get $apt_private source --download-only -qq "criu${v:+=$v}" >/dev/null 2>&1) || true
	dsc=$(find "$work/src" -maxdepth 1 -name 'criu_*.dsc' | head -1)
	orig=$(find "$work/src" -maxdepth 1 -name 'criu_*.orig.tar.*' | head -1)
	[ -n "$dsc" ] && [ -n "$orig" ] ||
		{ echo "install-deps: CRIU: apt-get source fetched no criu_*.dsc and .orig tarball from Debian sid" >&2; exit 1; }
	sum=$(sed -n '/^Checksums-Sha256:/,/^[^ ]/p' "$dsc" | awk -v f="$(basename "$orig")" '$3 == f {print $1}')
	[ -n "$sum" ] && echo "$sum  $orig" | sha256sum -c --quiet - ||
		{ echo "install-deps: CRIU: $(basename "$orig") does not match its checksum in $(basename "$dsc")" >&2; exit 1; }
	tar -xf "$orig" -C "$work/src"
	src=$(find "$work/src" -mindepth 1 -maxdepth 1 -type d -name 'criu-*' | head -1)
	[ -n "$src" ] || { echo "install-deps: CRIU: no source tree in $(basename "$orig")" >&2; exit 1; }
	echo "install-deps: CRIU: compiling $(basename "$src") (make criu, $(nproc) jobs)"
	make -C "$src" -j"$(nproc)" criu >"$work/build.log" 2>&1 ||
		{ cp "$work/build.log" /var/tmp/shoal-criu-build.log; tail -30 "$work/build.log" >&2
		  echo "install-deps: CRIU: build failed (log: /var/tmp/shoal-criu-build.log)" >&2; exit 1; }
	mkdir -p "$criu_home"
	install -m 755 "$src/criu/criu" "$criu_home/criu.new"
	mv "$criu_home/criu.new" "$criu_home/criu"
	rm -rf "$work"
	if "$criu_home/criu" check >/dev/null 2>&1; then
		echo "install-deps: CRIU $(criu_version "$criu_home/criu") installed as $criu_home/criu; criu check passes"
	else
		echo "install-deps: warning: CRIU installed as $criu_home/criu but \`criu check\` fails on this host; shoal runs without the checkpoint tier:" >&2
		"$criu_home/criu" check 2>&1 | tail -3 >&2 || true
	fi
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
