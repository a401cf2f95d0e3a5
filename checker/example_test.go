package checker_test

import (
	"fmt"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history"
)

func Example() {
	var now int64
	op := func(p string, t history.Type, f history.F, v history.Value) history.Op {
		now += 1000
		return history.Op{Time: now, Process: p, Type: t, F: f, Value: v}
	}
	h := history.Merge(history.History{
		op("producer-1", history.Invoke, history.Commit, history.Value{Event: "e1", Key: "k"}),
		op("producer-1", history.OK, history.Commit, history.Value{Event: "e1", Key: "k", Version: 1}),
		op("relay-0", history.OK, history.Publish, history.Value{Event: "e1"}),
		op("consumer-billing-1", history.OK, history.Deliver, history.Value{Event: "e1", Consumer: "billing"}),
		op("harness", history.OK, history.Drain, history.Value{}),
		op("harness", history.OK, history.FinalRead, history.Value{}),
	})
	g, _ := checker.ParseGuarantees("effectively-once,subscriptions=billing")
	r := checker.Check(h, checker.Options{Guarantees: g})
	fmt.Println(r.Valid, r.Reasons)
	for _, a := range r.Anomalies {
		fmt.Println(a.Kind, a.Subscription, a.Events, a.Boundaries[0].Boundary)
	}
	// Output:
	// invalid [1 lost in billing]
	// lost billing [e1] delivered
}
