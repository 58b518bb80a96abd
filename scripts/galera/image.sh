# The galera image of scripts/debian-images.sh (sourced by it): Debian's
# mariadb-server and galera-4, this folder's configuration and scripts.

# customizeGalera ROOT: adds the configuration and the start and ready
# scripts to the root file system at ROOT.
customizeGalera() {
	root="$1" dir="$(dirname "$script")/galera"
	# Debian's own Galera example configuration and the empty database
	# its package made: galera-start makes the member's on its volume.
	rm -rf "$root/var/lib/mysql" "$root/etc/mysql/mariadb.conf.d/60-galera.cnf"
	mkdir -p "$root/var/lib/mysql"
	chroot "$root" chown mysql:mysql /var/lib/mysql
	install -m 644 "$dir/galera.cnf" "$root/etc/mysql/mariadb.conf.d/70-shoal-galera.cnf"
	install -m 755 "$dir/galera-start" "$dir/galera-ready" "$root/usr/local/bin/"
}

# configureGalera IMAGE: the image's command, ports, user and volume.
configureGalera() {
	umoci config --image "$1" --config.cmd /usr/local/bin/galera-start \
		--config.exposedports 3306/tcp --config.exposedports 4567/tcp \
		--config.exposedports 4568/tcp --config.exposedports 4444/tcp \
		--config.user mysql --config.workingdir /var/lib/mysql \
		--config.volume /var/lib/mysql
}
