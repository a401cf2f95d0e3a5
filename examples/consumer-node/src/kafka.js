'use strict';
const { Kafka, logLevel, CompressionTypes, CompressionCodecs } = require('kafkajs');
const SnappyCodec = require('kafkajs-snappy');

// kafkajs decodes only gzip by itself and fails the whole fetch on any
// other codec ("KafkaJSNotImplemented: Snappy compression not
// implemented", then the consumer crashes for good). deliverycheck's relay,
// like most Go and Java producers, compresses batches with snappy:
// register the pure-JS codec (kafkajs-snappy, on snappyjs; no native
// build).
CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec;

// consumeKafka handles the topic's records in order (one partition at a
// time, the kafkajs default), committing each record's offset by hand
// (autoCommit: false) where settle says: after the transaction.
async function consumeKafka({ cfg, log, pool, dc, settle, applyEvent, parseEvent, onStop }) {
  const kafka = new Kafka({
    clientId: `inventory-${process.pid}`,
    brokers: cfg.brokers.split(','),
    logLevel: logLevel.WARN,
    connectionTimeout: 5000,
  });
  const consumer = kafka.consumer({
    groupId: cfg.group,
    // A killed member keeps its partitions until its session times out;
    // the kafkajs default (30 s) would stall every restart that long. 6 s
    // is the broker's minimum (group.min.session.timeout.ms).
    sessionTimeout: 6000,
    heartbeatInterval: 1000,
    maxWaitTimeInMs: 1000,
    allowAutoTopicCreation: false,
  });
  // kafkajs restarts itself after retriable errors; when it gives up,
  // exit and let the supervisor start a fresh process.
  consumer.on(consumer.events.CRASH, ({ payload }) => {
    log.error(`kafka consumer crashed: ${payload.error && payload.error.message} (restart: ${payload.restart})`);
    if (!payload.restart) process.exit(1);
  });
  await consumer.connect();
  // The group has no committed offset on its first run: start from the
  // beginning, or the events published before we joined are skipped.
  await consumer.subscribe({ topic: cfg.topic, fromBeginning: true });
  let stopping = false;
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ topic, partition, message }) => {
      if (stopping) return;
      const header = (k) => (message.headers[k] === undefined ? undefined : String(message.headers[k]));
      const id = header('event-id');
      const lineage = { event: id, consumer: cfg.subscription, partition, offset: Number(message.offset) };
      // Kafka has no delivery count: a redelivery is the same offset read
      // again after a restart, so no attempt number here.
      if (id) await dc.record({ f: 'deliver', value: lineage });
      try {
        const ev = parseEvent(id, message.key && String(message.key), header('version'));
        await settle(ev, {
          apply: () => applyEvent(pool, cfg.subscription, ev, dc.failpoint),
          // The committed offset is the NEXT record to read.
          ack: async () => {
            await consumer.commitOffsets([{ topic, partition, offset: (BigInt(message.offset) + 1n).toString() }]);
            await dc.record({ f: 'ack', value: lineage });
          },
          failpoint: dc.failpoint,
        });
      } catch (err) {
        // Unsafe to go on from a record we could not finish: exit and let
        // the supervisor start us again from the last committed offset.
        log.error(`record at ${topic}[${partition}]@${message.offset}: ${err.message}`);
        process.exit(1);
      }
    },
  });
  log.info(`consuming topic ${cfg.topic} in group ${cfg.group}`);
  onStop(async () => {
    stopping = true;
    await consumer.disconnect();
  });
}

module.exports = { consumeKafka };
