#!/usr/bin/env bash
# Builds deliverycheck's local container images from Debian packages, with
# no container registry, on two bases:
#
#   bookworm: localhost/deliverycheck/postgres:15
#             localhost/deliverycheck/rabbitmq:3.10
#             localhost/deliverycheck/kafka:$KAFKA_VERSION   (default 4.1.1)
#   trixie:   localhost/deliverycheck/postgres:17
#             localhost/deliverycheck/rabbitmq:4.0           (4.0.5)
#
# 1. base, per suite: a `debootstrap --variant=minbase` rootfs with the
#    packages in images/base/packages-<suite>, trimmed by images/base/trim.sh,
#    tarred (cached under ~/.cache/deliverycheck/images/, keyed by those two
#    files and the suite) and imported as
#    localhost/deliverycheck/base:<suite>-<key>. The two debootstraps run
#    in parallel (they mostly wait on downloads).
# 2. one `build` per service image of images/<svc>/Containerfile FROM its
#    suite's base; the Kafka build context also gets the broker jars
#    (fetched with `go run ./cmd/deliverycheck deps` if they are not cached
#    yet, or taken from $KAFKA_HOME/libs).
#
# Every image is labelled deliverycheck.recipe=<hash of images/** (but
# *.md) and the Kafka version>; when all the selected images carry the
# current hash the script prints "images up to date" and exits at once.
# --force rebuilds them anyway (the cached rootfs is still reused; delete
# ~/.cache/deliverycheck/images to debootstrap again).
#
# Environment: DC_SUITES (which bases' images to build: "bookworm trixie",
# the default, or either alone), DC_ENGINE (podman, default, or docker),
# KAFKA_VERSION, KAFKA_HOME, DC_DEBIAN_MIRROR (default
# http://deb.debian.org/debian).
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
suites=${DC_SUITES:-bookworm trixie}
mirror=${DC_DEBIAN_MIRROR:-http://deb.debian.org/debian}
user_cache=${XDG_CACHE_HOME:-$HOME/.cache}/deliverycheck
cache=$user_cache/images

kafka_image=localhost/deliverycheck/kafka:$kafka_version
# suite_images SUITE: the service images built on SUITE's base.
suite_images() {
	case "$1" in
		bookworm) echo "localhost/deliverycheck/postgres:15 localhost/deliverycheck/rabbitmq:3.10 $kafka_image" ;;
		trixie) echo "localhost/deliverycheck/postgres:17 localhost/deliverycheck/rabbitmq:4.0" ;;
		*) echo "build.sh: unknown suite $1 in DC_SUITES (want bookworm and/or trixie)" >&2; return 1 ;;
	esac
}
images=()
for suite in $suites; do
	more=$(suite_images "$suite") || exit 2
	read -ra more <<<"$more"
	images+=("${more[@]}")
done
[ ${#images[@]} -gt 0 ] || { echo "build.sh: DC_SUITES is empty" >&2; exit 2; }

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

# labels_current: whether all the selected images exist with the current recipe.
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

# --- 1. base rootfs and image, per suite ---
base_key() { cat "$here/base/packages-$1" "$here/base/trim.sh" <(echo "$1") | sha256sum | cut -c1-16; }
base_image() { echo "localhost/deliverycheck/base:$1-$(base_key "$1")"; }
# rootfs SUITE: debootstraps and trims SUITE's rootfs into its cached
# tarball unless it is there; its output goes to $work/<suite>.log, so two
# can run at once.
rootfs() {
	local suite=$1 key tarball pkgs dir=$work/rootfs-$1
	key=$(base_key "$suite")
	tarball=$cache/rootfs-$suite-$key.tar
	[ ! -s "$tarball" ] || return 0
	command -v debootstrap >/dev/null || { echo "build.sh: debootstrap not found (apt-get install debootstrap)"; return 1; }
	pkgs=$(sed 's/#.*//' "$here/base/packages-$suite" | tr -s ' \t\n' '\n' | sed '/^$/d' | paste -sd, -)
	echo "debootstrap $suite with $pkgs"
	local t=$EPOCHREALTIME
	if ! $sudo debootstrap --variant=minbase --include="$pkgs" "$suite" "$dir" "$mirror" >"$work/debootstrap-$suite.log" 2>&1; then
		tail -n 40 "$work/debootstrap-$suite.log"
		echo "build.sh: debootstrap $suite failed"
		return 1
	fi
	echo "debootstrap $suite: $(elapsed "$t")"
	$sudo bash "$here/base/trim.sh" "$dir"
	$sudo tar --numeric-owner -C "$dir" -cf "$dir.tar" .
	$sudo chown "$(id -u):$(id -g)" "$dir.tar"
	remove "$dir"
	mv "$dir.tar" "$tarball"
	# Only the current rootfs of each suite is kept.
	find "$cache" -maxdepth 1 -name "rootfs-$suite-*.tar" ! -name "rootfs-$suite-$key.tar" -delete
	echo "rootfs $suite: $(du -m "$tarball" | cut -f1) MB, $(elapsed "$t") with trim + tar"
}
echo "[images] recipe $recipe, suites $suites, engine $engine"
pids=()
for suite in $suites; do
	image_exists "$(base_image "$suite")" && continue
	rootfs "$suite" >"$work/$suite.log" 2>&1 &
	pids+=("$!:$suite")
done
for p in "${pids[@]}"; do
	if ! wait "${p%%:*}"; then
		cat "$work/${p#*:}.log" >&2
		exit 1
	fi
	sed 's/^/[images] /' "$work/${p#*:}.log"
done
[ ${#pids[@]} -eq 0 ] || done_step "rootfs ($suites)"
# Old rootfs tarballs of before the suites were named.
find "$cache" -maxdepth 1 -name 'rootfs-*.tar' ! -name 'rootfs-bookworm-*' ! -name 'rootfs-trixie-*' -delete
for suite in $suites; do
	base_image=$(base_image "$suite")
	if image_exists "$base_image"; then
		done_step "base $suite (exists)"
		continue
	fi
	"$engine" import \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'ENV LANG=C.UTF-8' \
		--change 'CMD ["/bin/bash"]' \
		--change "LABEL deliverycheck.base=$(base_key "$suite")" \
		--change "LABEL deliverycheck.suite=$suite" \
		"$cache/rootfs-$suite-$(base_key "$suite").tar" "$base_image" >"$work/import.log" 2>&1 || { cat "$work/import.log" >&2; exit 1; }
	done_step "import base $suite"
done

# --- 2. Kafka jars (the Kafka image is on the bookworm base) ---
want_kafka=
[[ " $suites " != *" bookworm "* ]] || want_kafka=1
if [ -n "${KAFKA_HOME:-}" ]; then
	libs=$KAFKA_HOME/libs
else
	libs=$user_cache/kafka-$kafka_version/libs
fi
if [ -n "$want_kafka" ] && ! compgen -G "$libs/kafka_2.1[0-9]-*.jar" >/dev/null; then
	if [ -n "${KAFKA_HOME:-}" ]; then
		echo "build.sh: KAFKA_HOME=$KAFKA_HOME has no kafka_2.13-*.jar in libs/" >&2
		exit 1
	fi
	echo "[images] fetching the Kafka $kafka_version jars: go run ./cmd/deliverycheck deps"
	(cd "$repo" && go run ./cmd/deliverycheck deps --kafka-version "$kafka_version")
	done_step "kafka jars"
fi

# --- 3. service images ---
# build NAME TAG CONTEXT SUITE [BUILD-ARG...]: logs to
# $cache/build-NAME.log, shown on failure.
build() {
	local name=$1 tag=$2 ctx=$3 suite=$4 log=$cache/build-$1.log
	shift 4
	local args=()
	for a; do args+=(--build-arg "$a"); done
	if ! "$engine" build \
		--build-arg BASE="$(base_image "$suite")" "${args[@]}" \
		--label deliverycheck.recipe="$recipe" \
		--label deliverycheck.base="$(base_key "$suite")" \
		--label deliverycheck.suite="$suite" \
		-t "$tag" -f "$ctx/Containerfile" "$ctx" >"$log" 2>&1; then
		tail -n 40 "$log" >&2
		echo "build.sh: building $tag failed (log: $log)" >&2
		exit 1
	fi
	done_step "$tag"
}
for suite in $suites; do
	case $suite in
		bookworm)
			build postgres-15 localhost/deliverycheck/postgres:15 "$here/postgres" bookworm PG_MAJOR=15
			build rabbitmq-3.10 localhost/deliverycheck/rabbitmq:3.10 "$here/rabbitmq" bookworm
			mkdir -p "$work/kafka/libs"
			cp -a "$here/kafka/." "$work/kafka/"
			cp -a "$libs"/*.jar "$work/kafka/libs/"
			build kafka "$kafka_image" "$work/kafka" bookworm
			;;
		trixie)
			build postgres-17 localhost/deliverycheck/postgres:17 "$here/postgres" trixie PG_MAJOR=17
			build rabbitmq-4.0 localhost/deliverycheck/rabbitmq:4.0 "$here/rabbitmq" trixie
			;;
	esac
done

# --- 4. tidy: the previous builds of these images and older bases ---
"$engine" image prune -f --filter label=deliverycheck.recipe >/dev/null 2>&1 || :
# A built suite's other bases, and bases of before the suites were named;
# a suite not built this time keeps its base.
keep=()
for suite in $suites; do keep+=("$(base_image "$suite")"); done
for old in $("$engine" images --format '{{.Repository}}:{{.Tag}}' | grep '^localhost/deliverycheck/base:' || :); do
	tag=${old#localhost/deliverycheck/base:}
	case " ${keep[*]} " in *" $old "*) continue ;; esac
	other=${tag%%-*}
	if [ "$other" = "$tag" ] || [[ " $suites " == *" $other "* ]]; then
		"$engine" rmi "$old" >/dev/null 2>&1 || :
	fi
done
done_step "tidy"

printf '[images] %-44s %8s\n' "total" "$(elapsed "$t_start")"
echo "[images] built: ${images[*]}"
