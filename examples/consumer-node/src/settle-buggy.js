'use strict';
// The bug: ack (RabbitMQ) or commit the offset (Kafka) as soon as the
// message arrives, then apply it. The broker forgets the message at the
// ack; a crash before the effect's COMMIT loses the event for good (no
// redelivery, no effect row). deliverycheck must report it lost.
module.exports = async function settle(ev, { apply, ack, failpoint }) {
  await ack();
  await failpoint('after-ack-before-commit', ev.id);
  await apply();
};
