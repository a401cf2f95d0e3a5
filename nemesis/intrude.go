package nemesis

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	ictx, cancel := intrusionContext(ctx)
	defer cancel()
	res, err := e.Intrude(ictx)
	switch {
	case err != nil && len(res.Messages) == 0:
		return effect{}, fmt.Errorf("intrude: %w", err)
	case err != nil:
		// Cut short: what the broker said to those sent still counts.
		return effect{undo: noop, bit: func() (string, error) {
			ev, berr := res.Evidence()
			if berr != nil {
				return "", fmt.Errorf("%w (cut short after %d messages: %v)", berr, len(res.Messages), err)
			}
			return fmt.Sprintf("%s (cut short after %d messages: %v)", ev, len(res.Messages), err), nil
		}}, nil
	}
	return effect{undo: noop, bit: res.Evidence}, nil
}

// intrusionTimeout bounds one intrusion: a few dozen messages, each
// answered within the publisher's own timeout.
const intrusionTimeout = time.Minute

// intrusionContext is the intrusion's context: not ended by the schedule's
// deadline (the end of the workload, which a step late in it would not
// outlast: the broker's refusals take a few hundred milliseconds each),
// but by an interruption (ctx cancelled) or intrusionTimeout.
func intrusionContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return operationContext(ctx, intrusionTimeout)
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
