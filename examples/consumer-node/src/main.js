'use strict';
// The "inventory" service of a shop, which reserves stock for every
// confirmed order exactly once, written the way a Node.js team would write
// it (amqplib, kafkajs, pg) and tested by deliverycheck. It reads Kafka or
// RabbitMQ, whichever the run's broker is, from the environment
// deliverycheck gives every external component (docs/contract.md).
//
// Per message: effect row + inbox row in one PostgreSQL transaction
// (inventory.js), then the ack or offset commit (settle.js). The crash
// windows are marked with failpoints through the harness's endpoint
// (deliverycheck.js), which do nothing outside a run.
const { Pool } = require('pg');
const { endpoint } = require('./deliverycheck');
const { parseEvent, applyEvent } = require('./inventory');
const { consumeKafka } = require('./kafka');
const { consumeRabbitMQ } = require('./rabbitmq');

const log = {
  line: (level, msg) => process.stderr.write(`${new Date().toISOString()} ${level} ${msg}\n`),
  info: (msg) => log.line('INFO', msg),
  warn: (msg) => log.line('WARN', msg),
  error: (msg) => log.line('ERROR', msg),
};

function configFromEnv(env = process.env) {
  const cfg = {
    dsn: env.DELIVERYCHECK_POSTGRES_DSN,
    broker: env.DELIVERYCHECK_BROKER || 'kafka',
    subscription: env.DELIVERYCHECK_SUBSCRIPTION,
    brokers: env.DELIVERYCHECK_KAFKA_BROKERS,
    topic: env.DELIVERYCHECK_KAFKA_TOPIC,
    group: env.DELIVERYCHECK_KAFKA_GROUP,
    // Every node's URL when the broker is a cluster (comma-separated),
    // the single URL of an older harness otherwise.
    amqpURLs: (env.DELIVERYCHECK_AMQP_URLS || env.DELIVERYCHECK_AMQP_URL || '').split(',').filter(Boolean),
    queue: env.DELIVERYCHECK_AMQP_QUEUE,
  };
  if (!cfg.dsn || !cfg.subscription) throw new Error('set DELIVERYCHECK_POSTGRES_DSN and DELIVERYCHECK_SUBSCRIPTION');
  if (cfg.broker === 'kafka') {
    if (!cfg.brokers || !cfg.topic || !cfg.group) {
      throw new Error('kafka: set DELIVERYCHECK_KAFKA_BROKERS, _KAFKA_TOPIC and _KAFKA_GROUP');
    }
  } else if (cfg.broker === 'rabbitmq') {
    if (cfg.amqpURLs.length === 0 || !cfg.queue) throw new Error('rabbitmq: set DELIVERYCHECK_AMQP_URLS (or _AMQP_URL) and DELIVERYCHECK_AMQP_QUEUE');
  } else {
    throw new Error(`DELIVERYCHECK_BROKER=${JSON.stringify(cfg.broker)}: want kafka or rabbitmq`);
  }
  return cfg;
}

// main runs the service with the given settle order (settle.js or, in
// the buggy build, settle-buggy.js).
async function main(settle) {
  const cfg = configFromEnv();
  const pool = new Pool({
    connectionString: cfg.dsn,
    max: 2,
    connectionTimeoutMillis: 5000,
    query_timeout: 10000,
  });
  // An idle connection that breaks is dropped by the pool; the next
  // query gets a fresh one.
  pool.on('error', (err) => log.warn(`postgres idle connection: ${err.message}`));
  const dc = endpoint(log);
  let stop = async () => {};
  const onStop = (fn) => (stop = fn);
  // At the end of a run the harness sends SIGTERM and waits 30 s.
  for (const sig of ['SIGTERM', 'SIGINT']) {
    process.once(sig, async () => {
      log.info(`${sig}: stopping`);
      const timer = setTimeout(() => process.exit(0), 20000);
      timer.unref();
      await stop().catch((err) => log.warn(`stop: ${err.message}`));
      await pool.end().catch(() => {});
      process.exit(0);
    });
  }
  const deps = { cfg, log, pool, dc, settle, applyEvent, parseEvent, onStop };
  await (cfg.broker === 'rabbitmq' ? consumeRabbitMQ(deps) : consumeKafka(deps));
}

function start(settle) {
  main(settle).catch((err) => {
    log.error(`consumer failed: ${err.stack || err.message}`);
    process.exit(1);
  });
}

module.exports = { start, configFromEnv, log };
