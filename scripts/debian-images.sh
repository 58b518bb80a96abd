#!/bin/sh
# Builds small Debian bookworm example images from Debian's own packages
# with mmdebstrap (variant essential: no apt, no docs, no apt caches), each
# as an OCI image layout tar with its command, port and user set, ready for
#   shoal image import PATH --tag debian-NAME:1
# and the shoal.toml in examples/debian/NAME/.
#
# Usage: scripts/debian-images.sh [NAME...]   (default: all of them)
#   apache-php  apache2 + libapache2-mod-php: a phpinfo() page on :80
#   nginx       nginx: a static page on :80
#   python      python3: a tiny http.server app on :8080, run as nobody
#   galera      mariadb-server + galera-4: a Galera cluster member on :3306 (scripts/galera/)
#   django      python3-django: a small Django project on :8080 that migrates SQLite at boot (scripts/django/)
# Prints the path of each image's tar on stdout, progress on stderr.
#
# Built images are kept in $SHOAL_IMAGE_CACHE (default
# /var/cache/shoal/debian-images) as NAME-HASH.tar, HASH a digest of this
# script (which holds the package lists and every file it adds), so a second
# run builds nothing. The packages come from $DEBIAN_MIRROR, by default the
# Debian mirror apt uses on this host. Needs root, mmdebstrap and umoci
# (scripts/install-deps.sh test installs both).
set -eu

cache="${SHOAL_IMAGE_CACHE:-/var/cache/shoal/debian-images}"
all="apache-php nginx python"
all="$all galera"
all="$all django"
script=$(readlink -f "$0")
. "$(dirname "$script")/galera/image.sh" # galera's customizeGalera and configureGalera
. "$(dirname "$script")/django/image.sh" # django's customizeDjango and configureDjango

say() { echo "debian-images: $*" >&2; }
die() { say "$*"; exit 1; }

# packages NAME: the Debian packages of image NAME besides the Essential set.
packages() {
	case "$1" in
	apache-php) echo "apache2 libapache2-mod-php" ;;
	nginx) echo "nginx" ;;
	python) echo "python3" ;;
	galera) echo "mariadb-server galera-4 rsync iproute2 procps" ;; # galera-start's rsync SST needs rsync and ss
	django) echo "python3-django" ;;
	*) return 1 ;;
	esac
}

# mirror: $DEBIAN_MIRROR, else the first Debian archive in apt's sources
# (deb822 or one-line), else deb.debian.org.
mirror() {
	if [ -n "${DEBIAN_MIRROR:-}" ]; then
		echo "$DEBIAN_MIRROR"
		return
	fi
	m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
		sed -n -e 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\/\{0,1\}\)[[:space:]]*$/\1/p' \
			-e 's/^deb[[:space:]]\{1,\}\(\[[^]]*\][[:space:]]\{1,\}\)\{0,1\}\([^[:space:]]*\/debian\/\{0,1\}\)[[:space:]].*/\2/p' |
		head -1)
	echo "${m:-http://deb.debian.org/debian}"
}

# checkMirror URL: fail early, and clearly, when the mirror cannot be
# reached (mmdebstrap's own error comes after minutes of retries).
checkMirror() {
	tmp_release=$(mktemp)
	if ! timeout 60 /usr/lib/apt/apt-helper download-file "$1/dists/bookworm/InRelease" "$tmp_release" >/dev/null 2>"$tmp_release.err"; then
		why=$(sed -n 's/^E: Failed to fetch [^ ]*  *//p' "$tmp_release.err" | head -1)
		rm -f "$tmp_release" "$tmp_release.err"
		die "the Debian mirror $1 is unreachable (${why:-no answer in 60 s}); set DEBIAN_MIRROR to a mirror this host reaches"
	fi
	rm -f "$tmp_release" "$tmp_release.err"
}

# customize NAME ROOT: the files image NAME adds to Debian's packages
# (run by mmdebstrap as a customize hook, outside the chroot).
customize() {
	root="$2"
	case "$1" in
	apache-php)
		rm -f "$root/var/www/html/index.html"
		printf '<?php phpinfo();\n' >"$root/var/www/html/index.php"
		# Apache's logs go to the replica's output, as Docker's images do.
		ln -sf /dev/stdout "$root/var/log/apache2/access.log"
		ln -sf /dev/stdout "$root/var/log/apache2/other_vhosts_access.log"
		ln -sf /dev/stderr "$root/var/log/apache2/error.log"
		cat >"$root/usr/local/bin/apache2-foreground" <<-'EOF'
		#!/bin/sh
		# Runs Apache in the foreground as its own process: apache2ctl's
		# environment, then exec (no shell left to swallow SIGTERM).
		set -e
		. /etc/apache2/envvars
		mkdir -p "$APACHE_RUN_DIR" "$APACHE_LOCK_DIR" "$APACHE_LOG_DIR"
		rm -f "$APACHE_PID_FILE"
		exec /usr/sbin/apache2 -D FOREGROUND "$@"
		EOF
		chmod 755 "$root/usr/local/bin/apache2-foreground"
		;;
	nginx)
		ln -sf /dev/stdout "$root/var/log/nginx/access.log"
		ln -sf /dev/stderr "$root/var/log/nginx/error.log"
		rm -f "$root"/var/www/html/index.nginx-debian.html
		printf 'hello from Debian'"'"'s nginx\n' >"$root/var/www/html/index.html"
		;;
	python)
		mkdir -p "$root/srv/app"
		cat >"$root/srv/app/app.py" <<-'EOF'
		"""A tiny web app on Python's standard library: / and /healthz."""
		import http.server
		import os
		import platform


		class Handler(http.server.BaseHTTPRequestHandler):
		    def do_GET(self):
		        if self.path == "/healthz":
		            body = b"ok\n"
		        else:
		            body = ("hello from python %s\n" % platform.python_version()).encode()
		        self.send_response(200)
		        self.send_header("Content-Type", "text/plain")
		        self.send_header("Content-Length", str(len(body)))
		        self.end_headers()
		        self.wfile.write(body)


		port = int(os.environ.get("PORT", "8080"))
		http.server.ThreadingHTTPServer(("", port), Handler).serve_forever()
		EOF
		;;
	galera) customizeGalera "$root" ;;
	django) customizeDjango "$root" ;;
	esac
}

# configure NAME IMAGE: the image's command, port, user and environment.
configure() {
	case "$1" in
	apache-php)
		umoci config --image "$2" --config.cmd /usr/local/bin/apache2-foreground \
			--config.exposedports 80/tcp --config.stopsignal SIGWINCH --config.workingdir /var/www/html
		;;
	nginx)
		umoci config --image "$2" --config.cmd /usr/sbin/nginx --config.cmd -g --config.cmd "daemon off;" \
			--config.exposedports 80/tcp --config.stopsignal SIGQUIT --config.workingdir /
		;;
	python)
		umoci config --image "$2" --config.cmd /usr/bin/python3 --config.cmd /srv/app/app.py \
			--config.exposedports 8080/tcp --config.user nobody --config.workingdir /srv/app \
			--config.env PYTHONUNBUFFERED=1
		;;
	galera) configureGalera "$2" ;;
	django) configureDjango "$2" ;;
	esac
}

# build NAME OUT: makes image NAME's layout tar at OUT.
build() {
	name="$1" out="$2"
	work=$(mktemp -d "${cache}/.build-$name.XXXXXX")
	# A signal ends the script (sh would go on after the handler), and the
	# exit removes the unfinished build.
	trap 'rm -rf "$work"' EXIT
	trap 'exit 143' INT TERM
	m=$(mirror)
	say "$name: checking the Debian mirror $m"
	checkMirror "$m"
	say "$name: mmdebstrap bookworm ($(packages "$name")) from $m (a few minutes the first time)"
	start=$(date +%s)
	# The downloaded packages are kept in $cache/debs for the next image
	# (mmdebstrap's sync-in/sync-out recipe); dpkg does not fsync each file
	# (force-unsafe-io: the tar is written once at the end). The environment
	# variable SHOAL_DEBIAN_IMAGE_STEP makes this script the customize hook.
	mkdir -p "$cache/debs"
	mmdebstrap --variant=essential --mode=root --format=tar \
		--include="$(packages "$name" | tr ' ' ',')" \
		--aptopt='APT::Install-Recommends "false"' --dpkgopt=force-unsafe-io \
		--skip=essential/unlink \
		--setup-hook='mkdir -p "$1"/var/cache/apt/archives' \
		--setup-hook="sync-in '$cache/debs' /var/cache/apt/archives/" \
		--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
		--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
		--skip=output/dev \
		--customize-hook="SHOAL_DEBIAN_IMAGE_STEP=customize sh '$script' $name \"\$1\"" \
		--customize-hook="sync-out /var/cache/apt/archives '$cache/debs'" \
		--customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/*.log "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old' \
		bookworm "$work/rootfs.tar" "$m" >&2 ||
		die "$name: mmdebstrap failed (see above)"
	say "$name: root file system $(du -h "$work/rootfs.tar" | cut -f1) in $(($(date +%s) - start)) s; making an OCI layout"
	umoci init --layout "$work/oci"
	umoci new --image "$work/oci:1"
	umoci raw add-layer --image "$work/oci:1" "$work/rootfs.tar"
	configure "$name" "$work/oci:1"
	tar -C "$work/oci" -cf "$work/image.tar" .
	mv "$work/image.tar" "$out"
	for old in "$cache/$name"-*.tar; do
		[ "$old" = "$out" ] || rm -f "$old" # built by an earlier version of this script
	done
	rm -rf "$work"
	trap - EXIT INT TERM
	say "$name: built $out ($(du -h "$out" | cut -f1), $(($(date +%s) - start)) s)"
}

if [ "${SHOAL_DEBIAN_IMAGE_STEP:-}" = customize ]; then
	customize "$1" "$2"
	exit 0
fi

[ "$(id -u)" = 0 ] || die "must run as root (mmdebstrap's root mode)"
for tool in mmdebstrap umoci; do
	command -v "$tool" >/dev/null || die "$tool is missing: apt-get install $tool (or scripts/install-deps.sh test)"
done
names="${*:-$all}"
for name in $names; do
	packages "$name" >/dev/null || { echo "usage: $0 [$(echo "$all" | tr ' ' '|')]..." >&2; exit 2; }
done
mkdir -p "$cache"
# The cache key of the images but galera's: a digest of this script without galera's lines.
sha256sum() { grep -v galera "$1" | command sha256sum; }
sha256sum() { grep -v -e galera -e django "$1" | command sha256sum; } # nor django's: each image's key changes only with its own lines
hash=$(sha256sum "$script" | cut -c1-12)
for name in $names; do
	[ "$name" != galera ] || hash=$(cat "$script" "$(dirname "$script")"/galera/* | command sha256sum | cut -c1-12)
	[ "$name" != galera ] || hash=$(grep -v django "$script" | cat - "$(dirname "$script")"/galera/* | command sha256sum | cut -c1-12) # without django's lines
	[ "$name" != django ] || hash=$(find "$script" "$(dirname "$script")"/django -type f | LC_ALL=C sort | xargs cat | command sha256sum | cut -c1-12)
	out="$cache/$name-$hash.tar"
	if [ -f "$out" ]; then
		say "$name: cached $out"
	else
		build "$name" "$out"
	fi
	echo "$out"
done
