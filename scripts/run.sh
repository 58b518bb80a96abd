#!/bin/sh
# Starts the shoal daemon on the embedded store, makes a busybox image and
# deploys the example apps to try it with, and prints where to go. Ctrl-C
# stops the daemon (containers keep running and are adopted by the next one).
set -eu
data="${1:-/var/lib/shoal}"
bin="$(cd "$(dirname "$0")/.." && pwd)/bin/shoal"
sock=/run/shoal/shoal.sock

ui=127.0.0.1:7080
"$bin" daemon --data-dir "$data" --ui "$ui" &
pid=$!
# Stop the daemon however this script ends (containers keep running and are
# adopted by the next daemon).
trap 'kill -TERM $pid 2>/dev/null; wait $pid' EXIT
trap 'exit 130' INT TERM
i=0
until "$bin" info >/dev/null 2>&1; do
	i=$((i + 1))
	if ! kill -0 $pid 2>/dev/null || [ $i -gt 100 ]; then
		echo "shoal daemon did not start; see the log above" >&2
		exit 1
	fi
	sleep 0.1
done

if ! "$bin" image inspect busybox:latest >/dev/null 2>&1; then
	tmp=$(mktemp -d)
	mkdir -p "$tmp/bin" "$tmp/etc" "$tmp/tmp"
	cp /bin/busybox "$tmp/bin/busybox"
	for a in $("$tmp/bin/busybox" --list); do
		[ -e "$tmp/bin/$a" ] || ln -s busybox "$tmp/bin/$a"
	done
	echo 'root:x:0:0:root:/root:/bin/sh' > "$tmp/etc/passwd"
	"$bin" image build "$tmp" --tag busybox:latest --cmd /bin/sh >/dev/null
	rm -rf "$tmp"
fi

# The example apps, deployed with their own shoal.toml (examples/NAME/).
top="$(cd "$(dirname "$0")/.." && pwd)"
for app in hello slowboot cpuburn selfscale; do
	if [ -x "$top/bin/examples/$app/$app" ]; then
		"$bin" image build "$top/bin/examples/$app" --tag "$app:1" --entrypoint "/$app" --port 8080 >/dev/null
		"$bin" app deploy -f "$top/examples/$app/shoal.toml" >/dev/null
	fi
done
proxy=$("$bin" info -o json | sed -n 's/.*"proxy": "\(.*\)".*/\1/p')
port=${proxy##*:}

cat <<MSG

shoal is running (data in $data, API on unix://$sock).
Dashboard (open once with the token; the browser then keeps a cookie):
  http://$ui/?token=$(cat "$data/api-token")
Apps (hello, slowboot, cpuburn, selfscale) are deployed; all but selfscale
(min 1) start on their first request:
  curl -H 'Host: hello.localhost' http://$proxy/
  curl http://slowboot.localhost:$port/        # waits for its 1.5 s boot once
  $bin events --app selfscale --follow         # selfscale's own calls under load
  $bin app ls
  $bin app status hello
  $bin events --follow
Containers:
  $bin run --rm busybox echo hello from a container
  $bin run --rm --memory 16Mi --network bridge busybox ip addr
  $bin image ls
  $bin ps -a
  curl --unix-socket $sock http://shoal/metrics
Ctrl-C stops the daemon.
MSG
wait $pid
