#!/usr/bin/env bash
# Entrypoint of localhost/deliverycheck/postgres, with the environment
# contract of the docker-library `postgres` image (a re-implementation,
# not a copy):
#
#   POSTGRES_PASSWORD          superuser password; required unless
#                              POSTGRES_HOST_AUTH_METHOD=trust
#   POSTGRES_USER              superuser name (default postgres)
#   POSTGRES_DB                database created at init (default: the user)
#   POSTGRES_INITDB_ARGS       extra initdb arguments (word-split)
#   POSTGRES_INITDB_WALDIR     initdb --waldir
#   POSTGRES_HOST_AUTH_METHOD  pg_hba method for `host all all all`
#                              (default: password_encryption, scram-sha-256)
#   PGDATA                     data dir (default /var/lib/postgresql/data)
#   POSTGRES_{PASSWORD,USER,DB,INITDB_ARGS}_FILE  read the value from a file
#
# `docker-entrypoint.sh postgres [args...]` (or just flags) initialises an
# empty PGDATA (initdb, a temporary socket-only server for the setup SQL
# and /docker-entrypoint-initdb.d/*, then stops it) and then execs postgres
# as the postgres user with the arguments. On first start the log shows
# "database system is ready to accept connections" twice (temporary server,
# then the real one), once on a restart, as with the official image.
# Any other command is exec'd as it is.
set -Eeo pipefail

# file_env VAR [DEFAULT]: VAR from $VAR, or the contents of $VAR_FILE.
file_env() {
	local var=$1 file=${1}_FILE def=${2:-}
	if [ "${!var:-}" ] && [ "${!file:-}" ]; then
		echo >&2 "error: both $var and $file are set (but are exclusive)"
		exit 1
	fi
	local val=$def
	if [ "${!var:-}" ]; then
		val=${!var}
	elif [ "${!file:-}" ]; then
		val=$(<"${!file}")
	fi
	export "$var"="$val"
	unset "$file"
}

setup_env() {
	file_env POSTGRES_PASSWORD
	file_env POSTGRES_USER postgres
	file_env POSTGRES_DB "$POSTGRES_USER"
	file_env POSTGRES_INITDB_ARGS
	: "${PGDATA:=/var/lib/postgresql/data}"
	export PGDATA
	: "${POSTGRES_HOST_AUTH_METHOD:=}"
	DATABASE_ALREADY_EXISTS=
	if [ -s "$PGDATA/PG_VERSION" ]; then
		DATABASE_ALREADY_EXISTS=true
	fi
}

# Directories and ownership, done as root before dropping to postgres.
create_dirs() {
	mkdir -p "$PGDATA"
	chmod 00700 "$PGDATA" || :
	mkdir -p /var/run/postgresql || :
	chmod 03775 /var/run/postgresql || :
	if [ -n "${POSTGRES_INITDB_WALDIR:-}" ]; then
		mkdir -p "$POSTGRES_INITDB_WALDIR"
		if [ "$(id -u)" = 0 ]; then
			find "$POSTGRES_INITDB_WALDIR" \! -user postgres -exec chown postgres: '{}' +
		fi
		chmod 700 "$POSTGRES_INITDB_WALDIR"
	fi
	if [ "$(id -u)" = 0 ]; then
		find "$PGDATA" \! -user postgres -exec chown postgres: '{}' +
		find /var/run/postgresql \! -user postgres -exec chown postgres: '{}' +
	fi
}

verify_env() {
	if [ -z "$POSTGRES_PASSWORD" ] && [ "$POSTGRES_HOST_AUTH_METHOD" != trust ]; then
		cat >&2 <<-'EOE'
			Error: Database is uninitialized and superuser password is not specified.
			       You must specify POSTGRES_PASSWORD to a non-empty value for the
			       superuser. For example, "-e POSTGRES_PASSWORD=password" on "podman run".

			       You may also use "POSTGRES_HOST_AUTH_METHOD=trust" to allow all
			       connections without a password. This is *not* recommended.
		EOE
		exit 1
	fi
	if [ "$POSTGRES_HOST_AUTH_METHOD" = trust ]; then
		echo >&2 'warning: POSTGRES_HOST_AUTH_METHOD=trust: every connection is allowed without a password'
	fi
}

init_db() {
	local args=()
	if [ -n "${POSTGRES_INITDB_WALDIR:-}" ]; then
		args+=(--waldir "$POSTGRES_INITDB_WALDIR")
	fi
	# --pwfile refuses an empty file, hence the newline. POSTGRES_INITDB_ARGS
	# is word-split on purpose (as the official image does).
	# shellcheck disable=SC2086
	initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
		$POSTGRES_INITDB_ARGS "${args[@]}"
}

# setup_hba postgres-args...: host connections from anywhere, with the
# configured method (default: whatever password_encryption is).
setup_hba() {
	if [ "${1:-}" = postgres ]; then shift; fi
	if [ -z "$POSTGRES_HOST_AUTH_METHOD" ]; then
		POSTGRES_HOST_AUTH_METHOD=$(postgres -C password_encryption "$@")
	fi
	{
		printf '\n'
		if [ "$POSTGRES_HOST_AUTH_METHOD" = trust ]; then
			printf '# warning: trust is enabled for all connections\n'
		fi
		printf 'host all all all %s\n' "$POSTGRES_HOST_AUTH_METHOD"
	} >>"$PGDATA/pg_hba.conf"
}

# A server on the unix socket only, with the user's arguments too.
temp_server_start() {
	if [ "${1:-}" = postgres ]; then shift; fi
	set -- "$@" -c listen_addresses='' -p "${PGPORT:-5432}"
	PGUSER="${PGUSER:-$POSTGRES_USER}" pg_ctl -D "$PGDATA" -o "$(printf '%q ' "$@")" -w start
}

temp_server_stop() {
	PGUSER="${PGUSER:-postgres}" pg_ctl -D "$PGDATA" -m fast -w stop
}

process_sql() {
	local query_runner=(psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc)
	if [ -n "$POSTGRES_DB" ]; then
		query_runner+=(--dbname "$POSTGRES_DB")
	fi
	PGHOST=/var/run/postgresql PGHOSTADDR='' "${query_runner[@]}" "$@"
}

setup_db() {
	local exists
	exists=$(POSTGRES_DB='' process_sql --dbname postgres --set db="$POSTGRES_DB" --tuples-only <<-'EOSQL'
		SELECT 1 FROM pg_database WHERE datname = :'db' ;
	EOSQL
	)
	if [ -z "$exists" ]; then
		POSTGRES_DB='' process_sql --dbname postgres --set db="$POSTGRES_DB" <<-'EOSQL'
			CREATE DATABASE :"db" ;
		EOSQL
		printf '\n'
	fi
}

# The official image's /docker-entrypoint-initdb.d: *.sh (sourced unless
# executable), *.sql, *.sql.gz, *.sql.xz, *.sql.zst.
process_init_files() {
	local f
	for f; do
		[ -e "$f" ] || continue # an empty dir's unexpanded glob
		case "$f" in
			*.sh)
				if [ -x "$f" ]; then
					printf '%s: running %s\n' "$0" "$f"
					"$f"
				else
					printf '%s: sourcing %s\n' "$0" "$f"
					# shellcheck disable=SC1090
					. "$f"
				fi
				;;
			*.sql) printf '%s: running %s\n' "$0" "$f"; process_sql -f "$f"; echo ;;
			*.sql.gz) printf '%s: running %s\n' "$0" "$f"; gunzip -c "$f" | process_sql; echo ;;
			*.sql.xz) printf '%s: running %s\n' "$0" "$f"; xzcat "$f" | process_sql; echo ;;
			*.sql.zst) printf '%s: running %s\n' "$0" "$f"; zstd -dc "$f" | process_sql; echo ;;
			*) printf '%s: ignoring %s\n' "$0" "$f" ;;
		esac
		echo
	done
}

want_help() {
	local arg
	for arg; do
		case "$arg" in
			-'?' | --help | --describe-config | -V | --version) return 0 ;;
		esac
	done
	return 1
}

main() {
	if [ "${1:0:1}" = - ]; then
		set -- postgres "$@"
	fi
	if [ "$1" = postgres ] && ! want_help "$@"; then
		setup_env
		create_dirs
		if [ "$(id -u)" = 0 ]; then
			# Again, as the postgres user (gosu in the official image).
			exec env HOME=/var/lib/postgresql setpriv --reuid=postgres --regid=postgres --init-groups "${BASH_SOURCE[0]}" "$@"
		fi
		if [ -z "$DATABASE_ALREADY_EXISTS" ]; then
			verify_env
			ls /docker-entrypoint-initdb.d/ >/dev/null
			init_db
			setup_hba "$@"
			export PGPASSWORD="${PGPASSWORD:-$POSTGRES_PASSWORD}"
			temp_server_start "$@"
			setup_db
			process_init_files /docker-entrypoint-initdb.d/*
			temp_server_stop
			unset PGPASSWORD
			printf '\nPostgreSQL init process complete; ready for start up.\n\n'
		else
			printf '\nPostgreSQL Database directory appears to contain a database; Skipping initialization\n\n'
		fi
	fi
	exec "$@"
}

main "$@"
