'use strict';
// The order that makes the consumer at-least-once: the effect's
// transaction first, the ack (RabbitMQ) or offset commit (Kafka) only
// after its COMMIT ("procesa → si va bien, ack"). A crash between the two
// redelivers an event already applied, which the inbox turns away.
//
// consumer-buggy.js swaps this file for settle-buggy.js, the way the Go
// example swaps dedupe.go for dedupe_buggy.go: the correct build has no
// switch that could make it buggy.
module.exports = async function settle(ev, { apply, ack, failpoint }) {
  await apply();
  await failpoint('after-commit-before-ack', ev.id);
  await ack();
};
