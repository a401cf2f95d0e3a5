package pipeline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/pipeline/intruder"
	"github.com/deliverycheck/deliverycheck/signing"
)

// The intrude fault's side of a deployment (docs/security.md, "The
// intruder and the broker"): a broker user of the run's own, made at
// Start with the rights Config.Intruder.Permissions says and removed at
// Close; Intrude sends the forged events as that user; the drain waits
// for every one the broker accepted to be dead-lettered, applied or
// skipped in every subscription.

// intruderRun is a deployment's intruder: its user, publisher, history
// and what it sent.
type intruderRun struct {
	cfg    intruder.Config
	user   string
	remove func(context.Context) error // removes the user
	pub    broker.Publisher
	mu     sync.Mutex // guards the rest; Intrude may run more than once
	rec    *history.Recorder
	rounds int // Intrude calls so far
	// accepted are the ids of the events the broker accepted.
	accepted []string
}

// intruderUserTimeout bounds making or removing the intruder's user.
const intruderUserTimeout = 30 * time.Second

// IntruderUser is the name of a run's intruder user on its broker.
func IntruderUser(name string) string { return name + "-intruder" }

// startIntruder makes the intruder's user and publisher, if the run has
// an intruder. The replay kind's events are signed here, by the harness,
// with the run's key (mintKey ran before): the intruder gets the signed
// events, never the key.
func (r *Deployment) startIntruder(ctx context.Context) error {
	if r.cfg.Intruder == nil {
		return nil
	}
	ic := r.cfg.Intruder.WithDefaults()
	if ic.RunID == "" {
		ic.RunID = r.cfg.Name
	}
	if len(r.cfg.Sources) > 0 && r.cfg.Intruder.Source == "" {
		ic.Source = r.cfg.Sources[0]
	}
	if r.cfg.Intruder.Key == "" {
		ic.Key = "order-" + strconv.Itoa(min(1, r.cfg.Keys-1))
	}
	if ic.Tenant == "" && r.cfg.Security != nil {
		ic.Tenant = r.cfg.Security.Tenant
	}
	if len(ic.Replays) == 0 {
		ic.Replays = r.signReplays(ic)
	}
	in := &intruderRun{cfg: ic, user: IntruderUser(r.cfg.Name)}
	password := randomPassword()
	uctx, cancel := context.WithTimeout(ctx, intruderUserTimeout)
	defer cancel()
	var err error
	switch r.cfg.Broker {
	case "rabbitmq":
		err = in.startRabbit(uctx, r, password)
	case "kafka":
		err = in.startKafka(uctx, r, password)
	}
	if err != nil {
		return fmt.Errorf("pipeline: intruder: %w", err)
	}
	r.intruder = in
	r.log.Info("intruder user made", "user", in.user, "permissions", ic.Permissions)
	return nil
}

// signReplays are ic's replay events signed with the run's key, as the
// relay signs; nil when the run does not sign (the replays go unsigned).
func (r *Deployment) signReplays(ic intruder.Config) []broker.Event {
	if len(r.key) == 0 {
		return nil
	}
	evs := intruder.ReplayEvents(ic, r.base)
	for i := range evs {
		evs[i].Signature = signing.Sign(r.key, evs[i])
	}
	return evs
}

// startRabbit gives the intruder a RabbitMQ user whose only right is
// writing to the events exchange (Publish), or none at all (None: the
// broker refuses its publishes with 403 ACCESS_REFUSED). It may neither
// configure nor read anything.
func (in *intruderRun) startRabbit(ctx context.Context, r *Deployment, password string) error {
	admin, err := r.cl.RabbitUserAdmin(cluster.RabbitMQ)
	if err != nil {
		return err
	}
	write := "^$"
	if in.cfg.Permissions == intruder.Publish {
		write = "^" + regexp.QuoteMeta(r.broker.Events()) + "$"
	}
	in.remove = func(ctx context.Context) error { return admin.DeleteUser(ctx, in.user) }
	if err := admin.AddUser(ctx, in.user, password, "^$", write, "^$"); err != nil {
		return errors.Join(err, in.remove(ctx))
	}
	var urls []string
	for _, u := range r.broker.URLs() {
		cu, err := withCredentials(u, in.user, password)
		if err != nil {
			return errors.Join(err, in.remove(ctx))
		}
		urls = append(urls, cu)
	}
	in.pub, err = broker.NewRabbitPublisher(broker.RabbitConfig{URLs: urls, Exchange: r.broker.Events(), Logger: r.log.With("process", intruder.Process)}, broker.RabbitConfirmed)
	if err != nil {
		return errors.Join(err, in.remove(ctx))
	}
	return nil
}

// startKafka gives the intruder a SCRAM-SHA-256 user on the broker's SASL
// listener with a WRITE ACL on the events topic (Publish) or no ACL at
// all (None: TOPIC_AUTHORIZATION_FAILED).
func (in *intruderRun) startKafka(ctx context.Context, r *Deployment, password string) error {
	sl, err := r.cl.SASLListener(cluster.Kafka)
	if err != nil {
		return err
	}
	admin := r.broker.Kafka()
	in.remove = func(ctx context.Context) error { return broker.DeleteKafkaUser(ctx, admin, in.user) }
	if err := broker.CreateKafkaUser(ctx, admin, in.user, password, in.cfg.Permissions == intruder.Publish); err != nil {
		return errors.Join(err, in.remove(ctx))
	}
	cfg := broker.KafkaConfig{
		Seeds: []string{sl.SASLEndpoint()}, Topic: r.broker.Events(),
		SASL:   &broker.KafkaSASL{User: in.user, Password: password},
		Logger: r.log.With("process", intruder.Process),
	}
	in.pub, err = broker.NewKafkaPublisher(cfg, broker.KafkaPublisherOptions{NotIdempotent: true, MetadataMinAge: 50 * time.Millisecond})
	if err != nil {
		return errors.Join(err, in.remove(ctx))
	}
	return nil
}

// withCredentials is the AMQP URL u with user and password instead of
// the harness's.
func withCredentials(u, user, password string) (string, error) {
	p, err := url.Parse(u)
	if err != nil {
		return "", fmt.Errorf("broker URL: %w", err)
	}
	p.User = url.UserPassword(user, password)
	return p.String(), nil
}

func randomPassword() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Intrude runs the intruder once: every kind, per_kind messages each, as
// its own user, recorded in history/intruder.jsonl. The error is the
// harness's (no intruder in this run, the history); what the broker said
// is in the result.
func (r *Deployment) Intrude(ctx context.Context) (intruder.Result, error) {
	in := r.intruder
	if in == nil {
		return intruder.Result{}, errors.New("pipeline: this run has no intruder (its scenario has no security.intruder)")
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.rec == nil {
		rec, err := history.NewRecorder(filepath.Join(r.dir, HistoryDir, intruder.Process+".jsonl"), intruder.Process, r.base)
		if err != nil {
			return intruder.Result{}, err
		}
		in.rec = rec
	}
	// A second intrude step sends new events: ids of their own.
	in.rounds++
	c := in.cfg
	if in.rounds > 1 {
		c.RunID += "-r" + strconv.Itoa(in.rounds)
		c.Replays = r.signReplays(c)
	}
	res, err := intruder.Run(ctx, c, in.pub, in.rec)
	for _, e := range res.Accepted() {
		in.accepted = append(in.accepted, broker.SafeText(e.ID)) // as the consumers store it
	}
	return res, err
}

// intruderAccepted are the ids of the intruder's events the broker
// accepted so far.
func (r *Deployment) intruderAccepted() []string {
	if r.intruder == nil {
		return nil
	}
	r.intruder.mu.Lock()
	defer r.intruder.mu.Unlock()
	return append([]string(nil), r.intruder.accepted...)
}

// intruderPending lists the (accepted intruder event, subscription)
// pairs the subscription has not finished with yet, as "event in
// subscription": no dead letter, no effect, and no inbox mark (written in
// the transaction that applies an event, or skips it as older than what
// is applied: a forged version 1 of a workload aggregate already further
// on is skipped by any consumer with the version guard), in the built-in
// tables or a team's (its effects, dead-letters and inbox queries). The
// drain is not done while a subscription still owes an intruder event its
// fate.
func (r *Deployment) intruderPending(ctx context.Context) ([]string, error) {
	ids := r.intruderAccepted()
	if len(ids) == 0 {
		return nil, nil
	}
	var subs []string
	for _, s := range r.cfg.Subscriptions {
		if !slices.Contains(r.cfg.Unbound, s) { // an unbound queue never gets it
			subs = append(subs, s)
		}
	}
	resolved := `SELECT event_id, consumer FROM effects UNION ALL SELECT event_id, consumer FROM dead_letters
		UNION ALL SELECT event_id, consumer FROM inbox UNION ALL SELECT event_id, consumer FROM inbox_unchecked
		UNION ALL SELECT event_id, consumer FROM inbox_keyed`
	for _, q := range r.teamQueries() {
		resolved += ` UNION ALL SELECT event_id::text, consumer::text FROM (` + q.SQL + `) AS t`
	}
	rows, err := r.db.Query(ctx, `SELECT e.id || ' in ' || s.sub FROM unnest($1::text[]) AS e(id) CROSS JOIN unnest($2::text[]) AS s(sub)
		WHERE NOT EXISTS (SELECT 1 FROM (`+resolved+`) AS r WHERE r.event_id = e.id AND r.consumer = s.sub)
		ORDER BY 1`, ids, subs)
	if err != nil {
		return nil, fmt.Errorf("drain: intruder events: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("drain: intruder events: %w", err)
	}
	return out, nil
}

// closeIntruder closes the intruder's publisher and history and removes
// its user from the broker.
func (r *Deployment) closeIntruder() error {
	in := r.intruder
	if in == nil {
		return nil
	}
	r.intruder = nil
	var errs []error
	if in.pub != nil {
		errs = append(errs, in.pub.Close())
	}
	if in.rec != nil {
		errs = append(errs, in.rec.Close())
	}
	ctx, cancel := context.WithTimeout(context.Background(), intruderUserTimeout)
	defer cancel()
	if err := in.remove(ctx); err != nil {
		errs = append(errs, fmt.Errorf("pipeline: remove the intruder's user: %w", err))
	} else {
		r.log.Info("intruder user removed", "user", in.user)
	}
	return errors.Join(errs...)
}
