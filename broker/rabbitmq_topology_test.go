package broker

import (
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestRabbitTopologyAsDocumented: a team's library that declares the
// topology with the arguments docs/contract.md lists gets the harness's
// queues; one argument off is refused, as the doc warns. Redeliveries
// carry an integer x-delivery-count and first deliveries none, as the doc
// says. Keep the tables in docs/contract.md and this test in step.
func TestRabbitTopologyAsDocumented(t *testing.T) {
	rt := newRabbitTest(t, []string{"s"}, nil)
	ex, q := rt.cfg.Exchange, rt.sub(0)
	conn, err := amqp.Dial(rt.cfg.URLs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	documented := amqp.Table{
		"x-queue-type":              "quorum",
		"x-delivery-limit":          int64(5),
		"x-dead-letter-exchange":    ex + ".dlx",
		"x-dead-letter-routing-key": q,
		"x-dead-letter-strategy":    "at-least-once",
		"x-overflow":                "reject-publish",
	}
	if err := ch.ExchangeDeclare(ex, "fanout", true, false, false, false, nil); err != nil {
		t.Fatalf("events exchange as documented: %v", err)
	}
	if err := ch.ExchangeDeclare(ex+".dlx", "direct", true, false, false, false, nil); err != nil {
		t.Fatalf("dead-letter exchange as documented: %v", err)
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, documented); err != nil {
		t.Fatalf("subscription queue as documented: %v", err)
	}
	if _, err := ch.QueueDeclare(q+".dlq", true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatalf("dead-letter queue as documented: %v", err)
	}
	other := amqp.Table{}
	for k, v := range documented {
		other[k] = v
	}
	other["x-dead-letter-exchange"] = "elsewhere"
	_, err = ch.QueueDeclare(q, true, false, false, false, other)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		t.Fatalf("redeclare with another x-dead-letter-exchange: %v, want PRECONDITION_FAILED", err)
	}

	// The channel is closed by the refusal; read on fresh ones, raw, to
	// see the header's AMQP type as a team's library does.
	rt.publishOK(rt.publisher(RabbitConfirmed), events("doc", 1))
	first := rawNext(t, conn, q)
	if v, ok := first.Headers["x-delivery-count"]; ok {
		t.Errorf("first delivery carries x-delivery-count %v (%T); docs/contract.md says it has none", v, v)
	}
	again := rawNext(t, conn, q)
	if v, ok := again.Headers["x-delivery-count"].(int64); !ok || v < 1 {
		t.Errorf("redelivery's x-delivery-count = %v (%T), want a long >= 1", again.Headers["x-delivery-count"], again.Headers["x-delivery-count"])
	}
}

// rawNext takes one delivery from q on a channel of its own and closes
// the channel without acking, so the message is redelivered.
func rawNext(t *testing.T, conn *amqp.Connection, q string) amqp.Delivery {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	ds, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-ds:
		return d
	case <-time.After(10 * time.Second):
		t.Fatalf("no delivery from %s in 10s", q)
	}
	return amqp.Delivery{}
}
