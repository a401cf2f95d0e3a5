package history_test

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/deliverycheck/deliverycheck/history"
)

// A consumer worker records each hop of an event in its own file.
func ExampleRecorder() {
	dir, _ := os.MkdirTemp("", "history")
	defer os.RemoveAll(dir)
	runStart := time.Now() // in a real run, passed down by the harness
	rec, err := history.NewRecorder(filepath.Join(dir, "consumer-inventory-1.jsonl"), "consumer-inventory-1", runStart)
	if err != nil {
		panic(err)
	}
	v := history.Value{Event: "ord-17-v3", Consumer: "inventory", Key: "ord-17", Version: 3}
	rec.Record(history.OK, history.Deliver, v)
	rec.Record(history.Invoke, history.Apply, v)
	// ... the effect and the inbox row commit in one transaction ...
	rec.Record(history.OK, history.Apply, v)
	rec.Record(history.OK, history.Ack, v)
	rec.Close()

	h, cuts, err := history.ReadFile(filepath.Join(dir, "consumer-inventory-1.jsonl"))
	fmt.Println(len(h), len(cuts), err)
	for _, op := range h {
		fmt.Println(op.Index, op.Type, op.F, op.Value.Event)
	}
	// Output:
	// 4 0 <nil>
	// 0 ok deliver ord-17-v3
	// 1 invoke apply ord-17-v3
	// 2 ok apply ord-17-v3
	// 3 ok ack ord-17-v3
}
