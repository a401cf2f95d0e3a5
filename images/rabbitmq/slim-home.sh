#!/usr/bin/env bash
# slim-home.sh DIR: at image build time, makes DIR a RABBITMQ_HOME whose
# plugins dir links only the Erlang applications the core broker needs
# (rabbit and the closure of its .app dependencies found in the plugins
# dir), with DIR/sbin usable as RABBITMQ_SCRIPTS_DIR.
#
# Why: a node with no plugin enabled still loads every application in its
# plugins dir and scans their modules for feature flags and boot steps.
# Debian ships 70 there; the core needs about 20. The entrypoint uses this
# home only when no plugin is enabled, which saves 1-2 s per start.
set -euo pipefail
dir=${1:?usage: slim-home.sh DIR}
scripts=$(dirname "$(readlink -f /usr/lib/rabbitmq/bin/rabbitmq-server)")
plugins=$(dirname "$scripts")/plugins
declare -A app_dir need
for d in "$plugins"/*/; do
	d=${d%/}
	n=$(basename "$d")
	[ -d "$d/ebin" ] || continue
	app_dir[${n%%-*}]=$d
done
[ -n "${app_dir[rabbit]:-}" ] || { echo "slim-home: no rabbit application in $plugins" >&2; exit 1; }
todo=(rabbit)
while [ ${#todo[@]} -gt 0 ]; do
	a=${todo[-1]}
	unset 'todo[-1]'
	[ -z "${need[$a]:-}" ] || continue
	d=${app_dir[$a]:-}
	[ -n "$d" ] || continue # an OTP application, in Erlang's own lib dir
	need[$a]=1
	# {applications, [kernel, stdlib, ...]} in ebin/<app>.app
	deps=$(tr -d ' \n\t' <"$d/ebin/$a.app" | grep -o '{applications,\[[^]]*\]' | sed 's/.*\[//; s/\]//; s/,/ /g') || deps=
	for x in $deps; do todo+=("$x"); done
done
mkdir -p "$dir/sbin" "$dir/plugins"
ln -sfn "$scripts/rabbitmq-defaults" "$dir/sbin/rabbitmq-defaults"
for a in "${!need[@]}"; do
	ln -sfn "${app_dir[$a]}" "$dir/plugins/$(basename "${app_dir[$a]}")"
done
echo "slim-home: ${#need[@]} of ${#app_dir[@]} applications: ${!need[*]}"
