#!/usr/bin/env bash
# Builds deliverycheck's local container images from Debian packages, with
# no container registry:
#
#   localhost/deliverycheck/postgres:15
#   localhost/deliverycheck/rabbitmq:3.10
#   localhost/deliverycheck/kafka:$KAFKA_VERSION   (default 4.1.1)
#
# 1. base: a `debootstrap --variant=minbase` bookworm rootfs with the
#    packages in images/base/packages, trimmed by images/base/trim.sh,
#    tarred (cached under ~/.cache/deliverycheck/images/, keyed by those two
#    files) and imported as localhost/deliverycheck/base:<key>.
# 2. one `build` per service of images/<svc>/Containerfile FROM that base;
#    the Kafka build context also gets the broker jars (fetched with
#    `go run ./cmd/deliverycheck deps` if they are not cached yet, or taken
#    from $KAFKA_HOME/libs).
#
# Every image is labelled deliverycheck.recipe=<hash of images/** (but
# *.md) and the Kafka version>; when all three carry the current hash the
# script prints "images up to date" and exits at once. --force rebuilds
# them anyway (the cached rootfs is still reused; delete
# ~/.cache/deliverycheck/images to debootstrap again).
#
# Environment: DC_ENGINE (podman, default, or docker), KAFKA_VERSION,
# KAFKA_HOME, DC_DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail

force=
case "${1:-}" in
	--force) force=1 ;;
	"") ;;
	*) echo "usage: $0 [--force]" >&2; exit 2 ;;
esac

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
engine=${DC_ENGINE:-podman}
kafka_version=${KAFKA_VERSION:-4.1.1}
suite=bookworm
mirror=${DC_DEBIAN_MIRROR:-http://deb.debian.org/debian}
user_cache=${XDG_CACHE_HOME:-$HOME/.cache}/deliverycheck
cache=$user_cache/images

pg_image=localhost/deliverycheck/postgres:15
rabbit_image=localhost/deliverycheck/rabbitmq:3.10
kafka_image=localhost/deliverycheck/kafka:$kafka_version
images=("$pg_image" "$rabbit_image" "$kafka_image")

t_start=$EPOCHREALTIME
t_step=$t_start
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", b - a }'; }
# done_step NAME: prints NAME with the wall time since the previous step.
done_step() {
	printf '[images] %-44s %8s\n' "$1" "$(elapsed "$t_step")"
	t_step=$EPOCHREALTIME
}

# The recipe: every file under images/ but docs (path, mode, contents),
# plus what decides the Kafka jars.
recipe_hash() {
	(
		cd "$here"
		find . -type f ! -name '*.md' -printf '%m %p\n' | LC_ALL=C sort
		find . -type f ! -name '*.md' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
		echo "kafka $kafka_version ${KAFKA_HOME:-}"
	) | sha256sum | cut -c1-16
}
recipe=$(recipe_hash)

# labels_current: whether all three images exist with the current recipe.
labels_current() {
	local labels
	labels=$("$engine" image inspect --format '{{index .Config.Labels "deliverycheck.recipe"}}' "${images[@]}" 2>/dev/null) || return 1
	[ "$(grep -cx "$recipe" <<<"$labels")" = "${#images[@]}" ]
}

if [ -z "$force" ] && labels_current; then
	echo "images up to date (recipe $recipe): ${images[*]}"
	exit 0
fi

command -v "$engine" >/dev/null || { echo "build.sh: $engine not found (set DC_ENGINE)" >&2; exit 1; }
mkdir -p "$cache"
# One build at a time per user (concurrent test runs may all call this).
exec 9>"$cache/.lock"
if ! flock -n 9; then
	echo "[images] waiting for another build.sh to finish"
	flock 9
	if [ -z "$force" ] && labels_current; then
		echo "images up to date (recipe $recipe; built by the other build.sh)"
		exit 0
	fi
fi

sudo=
if [ "$(id -u)" != 0 ]; then
	sudo=sudo # debootstrap and the rootfs' root-owned files need root
fi
work=$(mktemp -d "$cache/.build-XXXXXX")
# remove DIR: unmounts whatever debootstrap may have left mounted under DIR
# (/proc, /sys, ... of the rootfs), then removes it.
remove() {
	local m
	for m in $(awk -v w="$1/" 'index($2, w) == 1 { print $2 }' /proc/mounts | sort -r); do
		$sudo umount -l "$m" 2>/dev/null || :
	done
	$sudo rm -rf --one-file-system "$1"
}
cleanup() { remove "$work"; }
trap cleanup EXIT

image_exists() { "$engine" image inspect "$1" >/dev/null 2>&1; }

# --- 1. base rootfs and image ---
base_key=$(cat "$here/base/packages" "$here/base/trim.sh" <(echo "$suite") | sha256sum | cut -c1-16)
base_image=localhost/deliverycheck/base:$base_key
tarball=$cache/rootfs-$base_key.tar
echo "[images] recipe $recipe, base $base_key, engine $engine"
if image_exists "$base_image"; then
	done_step "base image (exists)"
else
	if [ ! -s "$tarball" ]; then
		command -v debootstrap >/dev/null || { echo "build.sh: debootstrap not found (apt-get install debootstrap)" >&2; exit 1; }
		pkgs=$(sed 's/#.*//' "$here/base/packages" | tr -s ' \t\n' '\n' | sed '/^$/d' | paste -sd, -)
		echo "[images] debootstrap $suite with $pkgs (log: $work/debootstrap.log)"
		if ! $sudo debootstrap --variant=minbase --include="$pkgs" "$suite" "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1; then
			tail -n 40 "$work/debootstrap.log" >&2
			echo "build.sh: debootstrap failed" >&2
			exit 1
		fi
		done_step "debootstrap"
		$sudo bash "$here/base/trim.sh" "$work/rootfs"
		$sudo tar --numeric-owner -C "$work/rootfs" -cf "$work/rootfs.tar" .
		$sudo chown "$(id -u):$(id -g)" "$work/rootfs.tar"
		remove "$work/rootfs"
		mv "$work/rootfs.tar" "$tarball"
		# Only the current rootfs is kept.
		find "$cache" -maxdepth 1 -name 'rootfs-*.tar' ! -name "rootfs-$base_key.tar" -delete
		done_step "trim + tar ($(du -m "$tarball" | cut -f1) MB)"
	else
		echo "[images] using cached rootfs $tarball"
	fi
	"$engine" import \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'ENV LANG=C.UTF-8' \
		--change 'CMD ["/bin/bash"]' \
		--change "LABEL deliverycheck.base=$base_key" \
		"$tarball" "$base_image" >"$work/import.log" 2>&1 || { cat "$work/import.log" >&2; exit 1; }
	done_step "import base image"
fi

# --- 2. Kafka jars ---
if [ -n "${KAFKA_HOME:-}" ]; then
	libs=$KAFKA_HOME/libs
else
	libs=$user_cache/kafka-$kafka_version/libs
fi
if ! compgen -G "$libs/kafka_2.1[0-9]-*.jar" >/dev/null; then
	if [ -n "${KAFKA_HOME:-}" ]; then
		echo "build.sh: KAFKA_HOME=$KAFKA_HOME has no kafka_2.13-*.jar in libs/" >&2
		exit 1
	fi
	echo "[images] fetching the Kafka $kafka_version jars: go run ./cmd/deliverycheck deps"
	(cd "$repo" && go run ./cmd/deliverycheck deps --kafka-version "$kafka_version")
	done_step "kafka jars"
fi

# --- 3. service images ---
# build NAME TAG CONTEXT: logs to $cache/build-NAME.log, shown on failure.
build() {
	local name=$1 tag=$2 ctx=$3 log=$cache/build-$1.log
	if ! "$engine" build \
		--build-arg BASE="$base_image" \
		--label deliverycheck.recipe="$recipe" \
		--label deliverycheck.base="$base_key" \
		-t "$tag" -f "$ctx/Containerfile" "$ctx" >"$log" 2>&1; then
		tail -n 40 "$log" >&2
		echo "build.sh: building $tag failed (log: $log)" >&2
		exit 1
	fi
	done_step "$tag"
}
build postgres "$pg_image" "$here/postgres"
build rabbitmq "$rabbit_image" "$here/rabbitmq"
mkdir -p "$work/kafka/libs"
cp -a "$here/kafka/." "$work/kafka/"
cp -a "$libs"/*.jar "$work/kafka/libs/"
build kafka "$kafka_image" "$work/kafka"

# --- 4. tidy: the previous builds of these images and older bases ---
"$engine" image prune -f --filter label=deliverycheck.recipe >/dev/null 2>&1 || :
for old in $("$engine" images --format '{{.Repository}}:{{.Tag}}' | grep '^localhost/deliverycheck/base:' | grep -vx "$base_image" || :); do
	"$engine" rmi "$old" >/dev/null 2>&1 || :
done
done_step "tidy"

printf '[images] %-44s %8s\n' "total" "$(elapsed "$t_start")"
echo "[images] built: ${images[*]}"
