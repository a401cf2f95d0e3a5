'use strict';
const amqp = require('amqplib');

// connectFirst connects to the first of a cluster's node URLs that
// answers, so a consumer restarted after its node died reaches another.
async function connectFirst(urls, log) {
  let last;
  for (const url of urls) {
    try {
      return await amqp.connect(url, { timeout: 5000 });
    } catch (err) {
      last = err;
      log.error(`rabbitmq ${new URL(url).host}: ${err.message}`);
    }
  }
  throw last;
}

// consumeRabbitMQ handles the queue's deliveries one at a time, with
// manual acks (noAck: false). Anything unacked when the process dies (or
// its connection drops) goes back to the queue, so on any broker error it
// exits and lets the supervisor start it again: a delivery tag belongs to
// its channel, and acking an old tag on a new channel could ack another
// message.
async function consumeRabbitMQ({ cfg, log, pool, dc, settle, applyEvent, parseEvent, onStop }) {
  const conn = await connectFirst(cfg.amqpURLs, log);
  const fail = (what) => (err) => {
    log.error(`rabbitmq ${what}${err ? `: ${err.message}` : ''}`);
    process.exit(1);
  };
  let stopping = false;
  conn.on('error', fail('connection error'));
  conn.on('close', (err) => stopping || fail('connection closed')(err));
  const ch = await conn.createChannel();
  ch.on('error', fail('channel error'));
  ch.on('close', () => stopping || fail('channel closed')());
  await ch.prefetch(16);

  // The queue, its dead-letter exchange and delivery limit are the
  // harness's (docs/contract.md): consume it, do not redeclare it.
  let chain = Promise.resolve();
  const { consumerTag } = await ch.consume(
    cfg.queue,
    (msg) => {
      if (msg === null) return fail('consumer cancelled by the broker')();
      // amqplib calls back for every message without waiting: chain them
      // so they are applied and acked in order, one at a time.
      chain = chain.then(() => handle(msg)).catch(fail('delivery'));
    },
    { noAck: false },
  );
  log.info(`consuming queue ${cfg.queue}`);

  async function handle(msg) {
    if (stopping) return; // left unacked: redelivered to the next process
    const headers = msg.properties.headers || {};
    const id = msg.properties.messageId;
    // A quorum queue adds an integer x-delivery-count header to every
    // REdelivery (absent on the first one): 1 on the second delivery, 2
    // on the third... It counts every time the broker handed the message
    // out, also to a process killed with it still prefetched (unhandled),
    // and past x-delivery-limit the broker dead-letters the message. Plus
    // one, it is this delivery's attempt number, from 1.
    const redeliveries = Number.isInteger(headers['x-delivery-count']) ? headers['x-delivery-count'] : 0;
    const attempt = redeliveries + 1;
    const lineage = { event: id, consumer: cfg.subscription, tag: msg.fields.deliveryTag };
    if (id) await dc.record({ f: 'deliver', value: { ...lineage, attempt } });
    if (attempt > 1) log.info(`redelivery of ${id}: attempt ${attempt}`);
    const ev = parseEvent(id, headers['aggregate-id'], headers.version);
    await settle(ev, {
      apply: () => applyEvent(pool, cfg.subscription, ev, dc.failpoint),
      ack: async () => {
        ch.ack(msg);
        await dc.record({ f: 'ack', value: lineage });
      },
      failpoint: dc.failpoint,
    });
  }

  onStop(async () => {
    stopping = true;
    await ch.cancel(consumerTag).catch(() => {});
    await chain.catch(() => {});
    await conn.close().catch(() => {});
  });
}

module.exports = { consumeRabbitMQ };
