'use strict';
// The effect: reserve stock for a confirmed order, exactly once per event.
// The inbox row and the stock move are written in ONE transaction (la
// misma TX): a redelivered event finds its inbox row and changes nothing,
// and a crash before COMMIT leaves neither, so the redelivery applies it.

// parseEvent checks what every event carries (docs/contract.md): the
// event id, the aggregate (the order) and its version.
function parseEvent(id, order, version) {
  if (!id || !order || !/^[0-9]+$/.test(version || '')) {
    throw new Error(`no event-id, aggregate id or version (${JSON.stringify([id, order, version])})`);
  }
  return { id, order, version };
}

// applyEvent runs the transaction; it resolves once COMMIT has returned.
async function applyEvent(pool, subscription, ev, failpoint) {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const inbox = await client.query(
      `INSERT INTO shop_inbox (consumer, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
      [subscription, ev.id],
    );
    if (inbox.rowCount === 1) {
      await client.query(
        `INSERT INTO shop_stock_moves (consumer, event_id, order_id, version) VALUES ($1, $2, $3, $4)`,
        [subscription, ev.id, ev.order, ev.version],
      );
    }
    // Written, not committed: a crash here must lose nothing.
    await failpoint('after-effect-before-commit', ev.id);
    await client.query('COMMIT');
    client.release();
    return inbox.rowCount === 1;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    client.release(err);
    throw err;
  }
}

module.exports = { parseEvent, applyEvent };
