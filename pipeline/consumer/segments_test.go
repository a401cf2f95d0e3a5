package consumer

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/broker"
)

func TestSegments(t *testing.T) {
	tests := []struct {
		name string
		ds   string // key:event, space-separated, already in aggregate order
		want string // runs of event ids
	}{
		{"all distinct", "a:1 b:2 c:3", "[1 2 3]"},
		{"one aggregate twice", "a:1 a:2 b:3", "[1] [2 3]"},
		{"a run ends at each repeat", "a:1 b:2 b:3 c:4 c:5 c:6", "[1 2] [3 4] [5] [6]"},
		{"a redelivered event", "a:1 a:1", "[1] [1]"},
		{"one event id under two aggregates", "a:1 b:1 c:2", "[1] [1 2]"},
		{"one delivery", "a:1", "[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ds []*broker.Delivery
			var order []int
			for i, f := range strings.Fields(tt.ds) {
				key, id, _ := strings.Cut(f, ":")
				ds = append(ds, &broker.Delivery{Event: broker.Event{ID: id, Source: "/orders", Key: key, Version: 1}})
				order = append(order, i)
			}
			var got []string
			var all []int
			for _, seg := range segments(ds, order) {
				var ids []string
				for _, i := range seg {
					ids = append(ids, ds[i].ID)
				}
				got = append(got, fmt.Sprint(ids))
				all = append(all, seg...)
			}
			if g := strings.Join(got, " "); g != tt.want {
				t.Errorf("segments %s, want %s", g, tt.want)
			}
			if !slices.Equal(all, order) {
				t.Errorf("segments cover %v, want every delivery once in order %v", all, order)
			}
		})
	}
}
