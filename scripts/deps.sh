#!/usr/bin/env bash
# Installs what deliverycheck's local runtime needs on Debian/Ubuntu:
# PostgreSQL, RabbitMQ, a Java runtime and Maven (for the Kafka broker jars),
# Chromium (the reports tests open report.html in it headless; works with
# --no-install-recommends), Node.js with npm and Python 3 (the tests run
# examples/consumer-node and the endpoint clients docs/contract.md gives),
# then fetches the Kafka broker jars and Kafka Connect with
# Debezium (the debezium relay) from Maven Central into the user cache.
# iproute2 and iptables are what replicated scenarios (broker.nodes: 3,
# postgres.standby) use for a network namespace per node and the partitions
# between them (cluster/netns); a minimal Debian has neither.
# Idempotent and quick when everything is already there.
set -euo pipefail

pkgs=(postgresql rabbitmq-server default-jre-headless maven chromium nodejs npm python3 iproute2 iptables)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# A JDK already on PATH (e.g. a preinstalled OpenJDK) is as good as the package.
if command -v java >/dev/null 2>&1; then
	missing=("${missing[@]/default-jre-headless}")
fi
if command -v mvn >/dev/null 2>&1; then
	missing=("${missing[@]/maven}")
fi
# So is a Node.js (18 or later) with npm, or a Python 3, installed otherwise.
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
	missing=("${missing[@]/nodejs}")
	missing=("${missing[@]/npm}")
fi
if command -v python3 >/dev/null 2>&1; then
	missing=("${missing[@]/python3}")
fi
want=()
for p in "${missing[@]}"; do [ -n "$p" ] && want+=("$p"); done

if [ "${#want[@]}" -gt 0 ]; then
	sudo=""
	if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
	echo "deps: installing ${want[*]}"
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get update -q
	# Debian's packages would start system-wide servers; deliverycheck never
	# uses them (it runs its own on free ports), so ask invoke-rc.d not to.
	policy=/usr/sbin/policy-rc.d
	created_policy=""
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
		$sudo chmod +x "$policy"
		created_policy=1
	fi
	$sudo apt-get install -y -q --no-install-recommends "${want[@]}"
	[ -n "$created_policy" ] && $sudo rm -f "$policy"
fi

# The Kafka and Debezium jars: fetched once into ~/.cache/deliverycheck.
go run ./cmd/deliverycheck deps
