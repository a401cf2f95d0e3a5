'use strict';
// The shop's "billing" stage in Node.js with kafkajs transactions, tested by
// deliverycheck as a team's own processor (docs/contract.md, "Processor"):
// for each batch of the events topic it writes one record per input to each
// output topic and commits the batch's input offsets in the same Kafka
// transaction (transaction.sendOffsets), aborting a share of transactions
// on purpose and retrying the batch. Its transactional.id is the one the
// harness gives it, the same on every start, so a restart fences the
// process it replaces. It posts its transactions as lineage (txn,
// txn-input, txn-output ops) through the endpoint.
//
// commitOffsets says where the input offsets go: into the transaction
// (processor.js), or after it (processor-buggy.js).
const { Kafka, logLevel, CompressionTypes, CompressionCodecs } = require('kafkajs');
const SnappyCodec = require('kafkajs-snappy');
const { endpoint } = require('./deliverycheck');

// The relay's batches are snappy-compressed (src/kafka.js says why).
CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec;

const log = {
  line: (level, msg) => process.stderr.write(`${new Date().toISOString()} ${level} ${msg}\n`),
  info: (msg) => log.line('INFO', msg),
  error: (msg) => log.line('ERROR', msg),
};

function configFromEnv(env = process.env) {
  const cfg = {
    process: env.DELIVERYCHECK_PROCESS || 'processor',
    brokers: (env.DELIVERYCHECK_KAFKA_BROKERS || '').split(',').filter(Boolean),
    input: env.DELIVERYCHECK_KAFKA_TOPIC,
    group: env.DELIVERYCHECK_KAFKA_GROUP,
    outputs: (env.DELIVERYCHECK_KAFKA_OUTPUT_TOPICS || '').split(',').filter(Boolean),
    transactionalId: env.DELIVERYCHECK_TRANSACTIONAL_ID,
    abortRatio: Number(env.DELIVERYCHECK_ABORT_RATIO || 0),
    seed: Number(BigInt(env.DELIVERYCHECK_SEED || '1') % 4294967296n),
  };
  if (cfg.brokers.length === 0 || !cfg.input || !cfg.group || cfg.outputs.length === 0 || !cfg.transactionalId) {
    throw new Error('set DELIVERYCHECK_KAFKA_BROKERS, _KAFKA_TOPIC, _KAFKA_GROUP, _KAFKA_OUTPUT_TOPICS and DELIVERYCHECK_TRANSACTIONAL_ID');
  }
  return cfg;
}

// mulberry32: a small seeded generator, for the choice of aborts.
function random(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

async function run(commitOffsets) {
  const cfg = configFromEnv();
  const dc = endpoint(log);
  const rand = random(cfg.seed ^ Date.now());
  const kafka = new Kafka({ clientId: cfg.process, brokers: cfg.brokers, logLevel: logLevel.WARN, connectionTimeout: 5000 });
  // Connecting with the transactional.id fences any producer that used it
  // before (a killed or paused predecessor) and aborts its open transaction.
  const producer = kafka.producer({ transactionalId: cfg.transactionalId, idempotent: true, maxInFlightRequests: 1, transactionTimeout: 10000 });
  // read_committed (kafkajs's default): inputs of an aborted upstream
  // transaction are never read. A killed member keeps its partitions until
  // its session times out (kafkajs has no static membership).
  const consumer = kafka.consumer({ groupId: cfg.group, readUncommitted: false, sessionTimeout: 6000, heartbeatInterval: 1000, maxWaitTimeInMs: 500 });
  consumer.on(consumer.events.CRASH, ({ payload }) => {
    log.error(`kafka consumer crashed: ${payload.error && payload.error.message}`);
    process.exit(1);
  });
  await producer.connect();
  await consumer.connect();
  await consumer.subscribe({ topic: cfg.input, fromBeginning: true });
  const incarnation = Date.now().toString(36);
  let seq = 0;
  const stage = { cfg, dc, producer, consumer };

  await consumer.run({
    autoCommit: false,
    eachBatch: async ({ batch }) => {
      if (batch.messages.length === 0) return;
      // Until one commits: an aborted transaction's outputs never become
      // visible, so the batch is written again in the next one.
      for (let committed = false; !committed; ) {
        const id = `${cfg.process}:${incarnation}:${++seq}`;
        // The harness asks for a share of aborts so that readers meet
        // aborted records. kafkajs hands over few, large batches, so a
        // short run may draw none at the ratio: when any are asked for,
        // each incarnation's first transaction aborts, then they are
        // drawn at the ratio.
        const abort = cfg.abortRatio > 0 && (seq === 1 || rand() < cfg.abortRatio);
        committed = await transact(stage, batch, id, abort, commitOffsets);
      }
      await dc.failpoint('processor.after-commit-before-poll', eventOf(batch.messages[batch.messages.length - 1]));
      if (commitOffsets === 'after') {
        await consumer.commitOffsets([{ topic: batch.topic, partition: batch.partition, offset: nextOffset(batch) }]);
      }
    },
  });
  log.info(`processing ${cfg.input} into ${cfg.outputs.join(', ')} as ${cfg.transactionalId}`);
  for (const sig of ['SIGTERM', 'SIGINT']) {
    process.once(sig, async () => {
      setTimeout(() => process.exit(0), 10000).unref();
      await consumer.disconnect().catch(() => {});
      await producer.disconnect().catch(() => {});
      process.exit(0);
    });
  }
}

// transact runs one transaction over batch and says whether it committed.
// Its lineage: the invoke and the inputs before anything is written, each
// output once the broker acknowledged it, the outcome once it is known.
async function transact({ cfg, dc, producer }, batch, id, abort, commitOffsets) {
  const tv = { txn: id, transactional_id: cfg.transactionalId };
  await dc.record(
    { type: 'invoke', f: 'txn', value: tv },
    ...batch.messages.map((m) => ({ f: 'txn-input', value: { txn: id, topic: batch.topic, partition: batch.partition, offset: Number(m.offset), event: eventOf(m) } })),
  );
  const txn = await producer.transaction();
  try {
    // Each output goes to the input's partition (the output topics have
    // as many as the input topic), so the offsets the broker gives a
    // partition's batch name each record: base offset + its index.
    const messages = batch.messages.map((m) => ({
      key: m.key,
      value: m.value,
      partition: batch.partition,
      headers: { ...m.headers, 'input-partition': String(batch.partition), 'input-offset': String(m.offset) },
    }));
    const meta = await txn.sendBatch({ topicMessages: cfg.outputs.map((topic) => ({ topic, messages })) });
    const outputs = [];
    for (const r of meta) {
      batch.messages.forEach((m, i) => {
        outputs.push({ f: 'txn-output', value: { txn: id, topic: r.topicName, partition: r.partition, offset: Number(r.baseOffset) + i,
          event: eventOf(m), input_partition: batch.partition, input_offset: Number(m.offset) } });
      });
    }
    await dc.record(...outputs);
    await dc.failpoint('processor.after-produce-before-commit', eventOf(batch.messages[0]));
    if (abort) {
      await txn.abort();
      await dc.record({ type: 'fail', f: 'txn', value: { ...tv, reason: 'abort' } });
      return false;
    }
    if (commitOffsets === 'in-transaction') {
      await txn.sendOffsets({ consumerGroupId: cfg.group, topics: [{ topic: batch.topic, partitions: [{ partition: batch.partition, offset: nextOffset(batch) }] }] });
    }
    await txn.commit();
  } catch (err) {
    // The outcome is not known (a fenced producer's transaction was
    // aborted by its successor; a timeout may have committed it): say so,
    // and exit to start again from the committed offsets.
    await dc.record({ type: 'info', f: 'txn', value: { ...tv, error: err.message } });
    log.error(`transaction ${id}: ${err.message}`);
    process.exit(1);
  }
  await dc.record({ type: 'ok', f: 'txn', value: tv });
  return true;
}

// The committed offset is the next record to read.
function nextOffset(batch) {
  return (BigInt(batch.messages[batch.messages.length - 1].offset) + 1n).toString();
}

function eventOf(m) {
  const h = m.headers && m.headers['event-id'];
  return h === undefined ? '' : String(h);
}

function start(commitOffsets) {
  run(commitOffsets).catch((err) => {
    log.error(`processor failed: ${err.stack || err.message}`);
    process.exit(1);
  });
}

module.exports = { start, configFromEnv };
