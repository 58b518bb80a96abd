# The django image of scripts/debian-images.sh (sourced by it): Debian's
# python3-django and the small project in this folder's site/.

# customizeDjango ROOT: adds the project to the root file system at ROOT,
# its modules compiled (the app runs as nobody, who cannot write them).
customizeDjango() {
	root="$1" dir="$(dirname "$script")/django"
	mkdir -p "$root/srv/site"
	cp -R "$dir/site/." "$root/srv/site/"
	chroot "$root" python3 -m compileall -q /srv/site
}

# configureDjango IMAGE: the image's command, port, user and environment.
configureDjango() {
	umoci config --image "$1" --config.cmd /usr/bin/python3 --config.cmd /srv/site/serve.py \
		--config.exposedports 8080/tcp --config.user nobody --config.workingdir /srv/site \
		--config.env PYTHONUNBUFFERED=1 --config.env DJANGO_SETTINGS_MODULE=shoalsite.settings
}
