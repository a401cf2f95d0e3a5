#!/usr/bin/env bash
# Entrypoint of localhost/deliverycheck/rabbitmq, with the environment
# contract of the official `rabbitmq:3.10` image (a re-implementation).
# Most of the contract is RabbitMQ's own: rabbitmq-server reads
#
#   RABBITMQ_DEFAULT_USER / RABBITMQ_DEFAULT_PASS   first-boot user (guest/guest)
#   RABBITMQ_DEFAULT_VHOST                          first-boot vhost (/)
#   RABBITMQ_CONFIG_FILE / RABBITMQ_CONFIG_FILES    config file / conf.d dir
#                                                   (default /etc/rabbitmq/conf.d)
#   RABBITMQ_NODENAME, RABBITMQ_USE_LONGNAME, ...   (see rabbitmq-env)
#
# This script adds, as the official entrypoint did:
#
#   RABBITMQ_ERLANG_COOKIE   written to /var/lib/rabbitmq/.erlang.cookie
#                            (otherwise Erlang makes a random one on first start)
#   long node names when `hostname` and `hostname -s` differ
#
# and then runs the node as the rabbitmq user. The node is rabbit@<hostname>
# with its data in /var/lib/rabbitmq/mnesia/rabbit@<hostname>: a restarted
# container keeps its hostname, hence its node name and its queues.
set -euo pipefail

if [ "${1:0:1}" = - ]; then
	set -- rabbitmq-server "$@"
fi

if [ "$1" = rabbitmq-server ] && [ "$(id -u)" = 0 ]; then
	data=${RABBITMQ_DATA_DIR:-/var/lib/rabbitmq}
	mkdir -p "$data"
	if [ -n "${RABBITMQ_ERLANG_COOKIE:-}" ]; then
		cookie=$data/.erlang.cookie
		if [ -e "$cookie" ] && [ "$(cat "$cookie")" != "$RABBITMQ_ERLANG_COOKIE" ]; then
			echo >&2 "warning: $cookie does not match RABBITMQ_ERLANG_COOKIE; replacing it"
		fi
		printf '%s' "$RABBITMQ_ERLANG_COOKIE" >"$cookie"
		chmod 600 "$cookie"
	fi
	find "$data" \! -user rabbitmq -exec chown rabbitmq:rabbitmq '{}' +
fi

if [ "$1" = rabbitmq-server ]; then
	if [ -z "${RABBITMQ_USE_LONGNAME:-}" ] && [ "$(hostname)" != "$(hostname -s)" ]; then
		export RABBITMQ_USE_LONGNAME=true
	fi
	# With no plugin enabled, start from a RABBITMQ_HOME that holds only the
	# core broker's applications (see slim-home.sh): same node, faster boot.
	plugins_file=${RABBITMQ_ENABLED_PLUGINS_FILE:-/etc/rabbitmq/enabled_plugins}
	if [ -z "${RABBITMQ_SCRIPTS_DIR:-}${RABBITMQ_HOME:-}${RABBITMQ_PLUGINS_DIR:-}${RABBITMQ_ENABLED_PLUGINS:-}" ] &&
		[ -d /usr/lib/rabbitmq/slim/plugins ] &&
		{ [ ! -e "$plugins_file" ] || [ "$(tr -d ' \n\t' <"$plugins_file")" = '[].' ]; }; then
		export RABBITMQ_SCRIPTS_DIR=/usr/lib/rabbitmq/slim/sbin
	fi
	set -- /usr/lib/rabbitmq/bin/rabbitmq-server "${@:2}"
	if [ "$(id -u)" = 0 ]; then
		cd "${RABBITMQ_DATA_DIR:-/var/lib/rabbitmq}"
		exec setpriv --reuid=rabbitmq --regid=rabbitmq --init-groups "$@"
	fi
fi

exec "$@"
