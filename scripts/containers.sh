#!/usr/bin/env bash
# Makes the containers runtime usable on this machine: a container engine
# serving the Docker API, and the deliverycheck images (built from Debian
# packages by images/build.sh, since no registry may be reachable).
#
# Uses a Docker engine if one already answers; otherwise installs Podman
# (rootful, runc), writes the containers.conf it needs if there is none,
# and starts `podman system service` on /run/podman/podman.sock in the
# background (it keeps running after this script, like any daemon).
# Idempotent and quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

ping_sock() { curl -s --max-time 3 --unix-socket "$1" http://engine/_ping 2>/dev/null | grep -q OK; }

# The images are built with the CLI of the engine the tests use (a
# Docker-only machine has no podman to build with).
sock=""
if [ -n "${DOCKER_HOST:-}" ]; then
	echo "containers: using DOCKER_HOST=$DOCKER_HOST"
	case "$DOCKER_HOST" in
		*podman*) export DC_ENGINE=${DC_ENGINE:-podman} ;;
		*) export DC_ENGINE=${DC_ENGINE:-docker} ;;
	esac
elif [ -S /var/run/docker.sock ] && ping_sock /var/run/docker.sock; then
	echo "containers: using the Docker engine at /var/run/docker.sock"
	export DC_ENGINE=${DC_ENGINE:-docker}
else
	sock=/run/podman/podman.sock
	want=()
	for p in podman runc debootstrap curl; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || want+=("$p")
	done
	if [ "${#want[@]}" -gt 0 ]; then
		echo "containers: installing ${want[*]}"
		export DEBIAN_FRONTEND=noninteractive
		# A fresh machine often has apt busy at first (unattended
		# upgrades, or scripts/deps.sh in another shell): wait for its
		# lock instead of failing at once.
		lock=(-o DPkg::Lock::Timeout=300)
		$sudo apt-get "${lock[@]}" update -q
		$sudo apt-get "${lock[@]}" install -y -q --no-install-recommends "${want[@]}"
	fi
	# runc, and container rlimits no higher than this machine allows
	# (raising them is not permitted here: runc fails with "error setting
	# rlimit"; nproc above about 32768 is refused even under the hard limit).
	conf=/etc/containers/containers.conf
	if [ ! -e "$conf" ]; then
		nofile=$(ulimit -Hn); [ "$nofile" = unlimited ] || [ "$nofile" -gt 65536 ] && nofile=65536
		nproc=$(ulimit -Hu); [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768
		$sudo mkdir -p /etc/containers
		printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n[engine]\nruntime = "runc"\n' \
			"$nofile" "$nofile" "$nproc" "$nproc" | $sudo tee "$conf" >/dev/null
		echo "containers: wrote $conf"
	fi
	if ! ping_sock "$sock"; then
		echo "containers: starting podman system service on $sock"
		$sudo mkdir -p "$(dirname "$sock")"
		# A real daemon: from / (conmon inherits the service's working
		# directory and fails every container start, "write child: broken
		# pipe", once that directory is gone, e.g. a CI checkout removed
		# later), in its own session, and with every inherited file
		# descriptor closed (one left open on a pipe would keep whoever
		# reads this script's output waiting forever).
		$sudo start-stop-daemon --start --background --chdir / --output /tmp/podman-service.log \
			--exec "$(command -v podman)" -- system service --time=0 "unix://$sock"
		for _ in $(seq 1 100); do ping_sock "$sock" && break; sleep 0.1; done
		ping_sock "$sock" || { echo "containers: podman system service did not answer; see /tmp/podman-service.log" >&2; exit 1; }
	fi
	echo "containers: Podman $(podman version --format '{{.Server.Version}}' 2>/dev/null || podman --version) at unix://$sock"
fi

bash images/build.sh
