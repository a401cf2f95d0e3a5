package nemesis

import (
	"context"
	"errors"
	"fmt"

	"github.com/deliverycheck/deliverycheck/cluster"
)

// intrude runs the intruder through Env.Intrude (docs/security.md): its
// forged events, each published straight to the broker as its own user.
// The whole intrusion happens while the fault is injected; the heal has
// nothing to undo. It bit when the broker accepted or refused at least
// one message: accepted, the consumers' checks are what stands between
// it and an effect; refused, least privilege stopped it. A broker that
// answered none (every answer lost, or nothing could be sent) tested
// neither.
func (e *Env) intrude(ctx context.Context) (effect, error) {
	if e.Intrude == nil {
		return effect{}, errors.New("intrude: this run has no intruder (a scenario needs a security section with an intruder)")
	}
	res, err := e.Intrude(ctx)
	if err != nil {
		return effect{}, fmt.Errorf("intrude: %w", err)
	}
	return effect{undo: noop, bit: res.Evidence}, nil
}

// ableToIntrude says whether the run's broker can give the intruder a
// user of its own: a RabbitMQ whose users the runtime can add, or a Kafka
// with a SASL listener and an authorizer.
func (e *Env) ableToIntrude() error {
	if e.Cluster == nil {
		return nil
	}
	var err error
	switch e.Broker {
	case cluster.RabbitMQ:
		_, err = e.Cluster.RabbitUserAdmin(cluster.RabbitMQ)
	case cluster.Kafka:
		_, err = e.Cluster.SASLListener(cluster.Kafka)
	}
	return err
}
