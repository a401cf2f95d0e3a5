package intruder

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/pipeline/hostile"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
	"github.com/deliverycheck/deliverycheck/signing"
)

// TestForge pins each kind's event: a well-formed OrderConfirmed of
// version 1 of the workload's aggregate, in the run's tenant, made now,
// unsigned, but for the one thing that makes it that kind.
func TestForge(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 123, time.UTC)
	runKey := []byte("the run's key")
	c := Config{Tenant: "acme", Source: "/orders", Key: "order-1", RunID: "run1"}
	c.Replays = ReplayEvents(c, now.Add(-time.Minute))
	for i := range c.Replays {
		c.Replays[i].Signature = signing.Sign(runKey, c.Replays[i])
	}
	base := broker.Event{Source: "/orders", Key: "order-1", Version: 1, Type: producer.EventType,
		Tenant: "acme", Time: now.Format(time.RFC3339Nano)}
	for _, tc := range []struct {
		kind Kind
		edit func(*broker.Event)
	}{
		{Type, func(e *broker.Event) { e.Type = ForbiddenType }},
		{Tenant, func(e *broker.Event) { e.Tenant, e.Key = ForeignTenant, "globex/order-1" }},
		{SignatureMissing, func(*broker.Event) {}},
		{SignatureWrong, func(*broker.Event) {}},
		{Replay, func(e *broker.Event) { e.Time = now.Add(-time.Minute - ReplayAge).Format(time.RFC3339Nano) }},
		{VersionAhead, func(e *broker.Event) { e.Version = VersionAheadVersion }},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			got := Forge(c, tc.kind, 2, now)
			want := base
			want.ID = "intruder-" + string(tc.kind) + "-2-run1"
			tc.edit(&want)
			want.Payload = producer.Payload(want.Key, want.Version, false)
			sig := got.Signature
			got.Signature = ""
			if fmt.Sprint(got) != fmt.Sprint(want) || !bytes.Equal(got.Payload, want.Payload) {
				t.Errorf("forged\n %+v\nwant\n %+v", got, want)
			}
			got.Signature = sig
			switch tc.kind {
			case SignatureWrong:
				if sig == "" || signing.Verify(runKey, got) {
					t.Errorf("signature %q: want one that does not verify under the run's key", sig)
				}
			case Replay:
				if !signing.Verify(runKey, got) {
					t.Errorf("replay signature %q does not verify under the run's key", sig)
				}
			default:
				if sig != "" {
					t.Errorf("signature %q, want none", sig)
				}
			}
		})
	}
}

// fakePublisher answers each publish from its list, in order.
type fakePublisher struct{ answers []error }

func (p *fakePublisher) Publish(_ context.Context, evs []broker.Event) []error {
	a := p.answers[0]
	p.answers = p.answers[1:]
	return []error{a}
}

func (p *fakePublisher) Close() error { return nil }

// runRecorded runs the intruder with c through pub, recording into a
// history of its own, and returns the result and the history read back.
func runRecorded(t *testing.T, c Config, pub broker.Publisher) (Result, history.History) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "intruder.jsonl")
	rec, err := history.NewRecorder(path, Process, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), c, pub, rec)
	if err != nil {
		t.Fatal(err)
	}
	rec.Close()
	h, _, err := history.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return res, h
}

// TestRunRecords: an invoke and one completion per message, typed by the
// broker's answer, with the forged event's identity and its kind.
func TestRunRecords(t *testing.T) {
	refused := fmt.Errorf("rabbitmq publish: %w: ACCESS_REFUSED", broker.ErrRefused)
	pub := &fakePublisher{answers: []error{nil, refused, fmt.Errorf("x: %w", broker.ErrUnconfirmed), errors.New("not sent: dial")}}
	res, h := runRecorded(t, Config{Kinds: []Kind{Type, VersionAhead}, PerKind: 2, RunID: "r"}, pub)
	want := []string{
		"invoke intruder-type-1-r type", "ok intruder-type-1-r type",
		"invoke intruder-type-2-r type", "fail intruder-type-2-r type",
		"invoke intruder-version-ahead-1-r version-ahead", "info intruder-version-ahead-1-r version-ahead",
		"invoke intruder-version-ahead-2-r version-ahead", "fail intruder-version-ahead-2-r version-ahead",
	}
	var got []string
	for _, op := range h {
		if op.F != history.Intrude || op.Process != Process {
			t.Errorf("op %s by %s", op.F, op.Process)
		}
		got = append(got, fmt.Sprintf("%s %s %s", op.Type, op.Value.Event, op.Value.Detail))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("ops\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if h[3].Value.Error != refused.Error() || h[5].Value.Version != VersionAheadVersion {
		t.Errorf("refusal %q, version %d", h[3].Value.Error, h[5].Value.Version)
	}
	ev, err := res.Evidence()
	if err != nil || ev != "broker accepted 1 of 4 intruder messages; broker refused 1 of 4 intruder messages: "+refused.Error()+"; 1 of 4 intruder messages not sent: not sent: dial; 1 of 4 intruder messages unanswered: x: broker: publish outcome unknown" {
		t.Errorf("evidence %q %v", ev, err)
	}
	if acc := res.Accepted(); len(acc) != 1 || acc[0].ID != "intruder-type-1-r" {
		t.Errorf("accepted %v", acc)
	}
}

// TestRunHostile: a hostile kind is sent only when named, crafted by
// package hostile from the workload's aggregate with the id
// hostile-<kind>-<n>-<run>, and recorded as a consumer stores its id
// (broker.SafeText), so the checker can match the two.
func TestRunHostile(t *testing.T) {
	if slices.ContainsFunc(Config{}.WithDefaults().Kinds, Kind.Hostile) {
		t.Errorf("default kinds %v hold a hostile one", Config{}.WithDefaults().Kinds)
	}
	for _, k := range HostileKinds() {
		if got, err := ParseKind(string(k)); err != nil || got != k || !k.Hostile() {
			t.Errorf("ParseKind(%q) = %q, %v; hostile %v", k, got, err, k.Hostile())
		}
	}
	pub := &fakePublisher{answers: make([]error, len(HostileKinds()))}
	res, h := runRecorded(t, Config{Kinds: HostileKinds(), PerKind: 1, RunID: "r", Tenant: "acme", Source: "/orders", Key: "order-1"}, pub)
	if len(res.Messages) != len(HostileKinds()) || len(h) != 2*len(HostileKinds()) {
		t.Fatalf("%d messages, %d ops", len(res.Messages), len(h))
	}
	for i, m := range res.Messages {
		k := HostileKinds()[i]
		want := "hostile-" + string(k) + "-1-r"
		if m.Kind != k || !strings.HasPrefix(m.Event.ID, want) || m.Event.Key != "order-1" || m.Event.Tenant != "acme" || m.Event.Signature != "" {
			t.Errorf("message %d: kind %s, event %+v", i, m.Kind, m.Event)
		}
		op := h[2*i+1]
		if op.Value.Event != broker.SafeText(m.Event.ID) || op.Value.Detail != string(k) || !utf8.ValidString(op.Value.Event) {
			t.Errorf("%s op: event %q detail %q", k, op.Value.Event, op.Value.Detail)
		}
	}
	if inv := res.Messages[slices.Index(HostileKinds(), Kind(hostile.InvalidUTF8))].Event.ID; utf8.ValidString(inv) {
		t.Errorf("invalid-utf8 id %q is valid UTF-8", inv)
	}
}
