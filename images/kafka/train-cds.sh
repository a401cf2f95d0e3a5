#!/usr/bin/env bash
# Image build step: writes the class data sharing archives
# /opt/kafka/storage.jsa and /opt/kafka/kafka.jsa by running the entrypoint
# once (format, then a broker up to "Kafka Server started" and a graceful
# stop) with DC_KAFKA_CDS_DUMP=1, so the archives match the exact JVM and
# classpath the entrypoint uses. Without them the image works, only slower.
set -euo pipefail
work=$(mktemp -d)
log=$work/train.log
env -i PATH="$PATH" HOME="$work" DC_KAFKA_CDS_DUMP=1 \
	KAFKA_NODE_ID=1 KAFKA_PROCESS_ROLES=broker,controller \
	KAFKA_LISTENERS=PLAINTEXT://127.0.0.1:39092,CONTROLLER://127.0.0.1:39093 \
	KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://127.0.0.1:39092 \
	KAFKA_LISTENER_SECURITY_PROTOCOL_MAP=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT \
	KAFKA_CONTROLLER_LISTENER_NAMES=CONTROLLER KAFKA_CONTROLLER_QUORUM_VOTERS=1@127.0.0.1:39093 \
	KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR=1 KAFKA_LOG_DIRS="$work/data" \
	/etc/kafka/docker/run >"$log" 2>&1 &
pid=$!
start=$SECONDS
until grep -q 'Kafka Server started' "$log"; do
	if ! kill -0 "$pid" 2>/dev/null || [ $((SECONDS - start)) -gt 300 ]; then
		cat "$log" >&2
		echo "train-cds: the training broker did not start" >&2
		kill -KILL "$pid" 2>/dev/null || :
		exit 1
	fi
	sleep 0.2
done
echo "train-cds: broker started in $((SECONDS - start)) s; stopping it"
kill -TERM "$pid"
wait "$pid" || :
grep -i 'cds\|archive' "$log" | grep -iv 'log4j' | tail -5 || :
ls -l /opt/kafka/*.jsa
rm -rf "$work" /opt/kafka/config/server.properties /opt/kafka/logs/*
