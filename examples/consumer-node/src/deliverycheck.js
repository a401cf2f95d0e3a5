'use strict';
// The harness's endpoint, the any-language way to mark crash windows and
// to write lineage (docs/contract.md). DELIVERYCHECK_ENDPOINT is
// http://127.0.0.1:<port>/<token>/<worker>; outside a deliverycheck run it
// is absent and both calls do nothing.
//
// Only Node's own http module: one keep-alive agent, so a failpoint on
// every message costs a request on an open connection, not a handshake.

const http = require('node:http');

const agent = new http.Agent({ keepAlive: true, maxSockets: 2 });

function post(base, path, body) {
  const url = new URL(base + path);
  const attempt = (retried) =>
    new Promise((resolve, reject) => {
      const req = http.request(
        url,
        {
          method: 'POST',
          agent,
          headers: { 'content-type': 'application/x-ndjson', 'content-length': Buffer.byteLength(body) },
        },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c) => (text += c));
          res.on('end', () => resolve({ status: res.statusCode, text: text.trim() }));
          res.on('error', reject);
        },
      );
      req.on('error', (err) => {
        // A kept-alive connection the server closed while idle fails on
        // reuse: send once more on a fresh one, or a failpoint would be
        // skipped for a reason that has nothing to do with the run.
        if (!retried && req.reusedSocket && err.code === 'ECONNRESET') {
          attempt(true).then(resolve, reject);
        } else {
          reject(err);
        }
      });
      req.end(body);
    });
  return attempt(false);
}

function endpoint(log, base = process.env.DELIVERYCHECK_ENDPOINT) {
  if (!base) {
    return { enabled: false, failpoint: async () => {}, record: async () => {} };
  }
  base = base.replace(/\/+$/, '');
  let gone = false;
  const unreachable = (what, err) => {
    // Connection refused: the harness is gone (the run is ending). Go on.
    if (err.code === 'ECONNREFUSED') {
      if (!gone) log.warn(`deliverycheck endpoint unreachable (${what}): ${err.message}`);
      gone = true;
      return;
    }
    log.warn(`deliverycheck ${what}: ${err.message}`);
  };
  return {
    enabled: true,
    // failpoint returns at once when the window is not armed (204). When
    // it is, the harness records the crash and SIGKILLs this process
    // while the request is still open: the await never resolves.
    async failpoint(name, event) {
      const q = event ? `?event=${encodeURIComponent(event)}` : '';
      try {
        const res = await post(base, `/failpoint/${encodeURIComponent(name)}${q}`, '');
        if (res.status !== 204) log.warn(`failpoint ${name}: ${res.status} ${res.text}`);
      } catch (err) {
        unreachable(`failpoint ${name}`, err);
      }
    },
    // record appends ops to the run's history, e.g.
    // {f: 'deliver', value: {event, consumer, attempt}}; the harness
    // stamps index, time and process on arrival, so call it in order.
    async record(...ops) {
      const body = ops.map((op) => JSON.stringify({ type: 'ok', ...op })).join('\n') + '\n';
      try {
        const res = await post(base, '/history', body);
        if (res.status !== 204) log.warn(`history: ${res.status} ${res.text}`);
      } catch (err) {
        unreachable('history', err);
      }
    },
  };
}

module.exports = { endpoint };
