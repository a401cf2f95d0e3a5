package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/signing"
)

// authority is what the service demands of an event before it applies
// it, from the environment a run with a security section gives
// (docs/contract.md, docs/security.md): each check is on only when its
// variable is set. An event that came through our own broker is not
// therefore ours: anyone who can publish there can forge one.
type authority struct {
	key       []byte              // DELIVERYCHECK_SIGNING_KEY (hex)
	tenant    string              // DELIVERYCHECK_TENANT
	freshness time.Duration       // DELIVERYCHECK_FRESHNESS
	maxAhead  int64               // DELIVERYCHECK_MAX_VERSION_AHEAD
	may       map[string][]string // DELIVERYCHECK_AUTHORITY: source -> types it may emit
}

func authorityFromEnv() (authority, error) {
	var a authority
	var err error
	if k := os.Getenv("DELIVERYCHECK_SIGNING_KEY"); k != "" {
		if a.key, err = hex.DecodeString(k); err != nil {
			return a, fmt.Errorf("DELIVERYCHECK_SIGNING_KEY: %w", err)
		}
	}
	a.tenant = os.Getenv("DELIVERYCHECK_TENANT")
	if f := os.Getenv("DELIVERYCHECK_FRESHNESS"); f != "" {
		if a.freshness, err = time.ParseDuration(f); err != nil {
			return a, fmt.Errorf("DELIVERYCHECK_FRESHNESS: %w", err)
		}
	}
	if m := os.Getenv("DELIVERYCHECK_MAX_VERSION_AHEAD"); m != "" {
		if a.maxAhead, err = strconv.ParseInt(m, 10, 64); err != nil {
			return a, fmt.Errorf("DELIVERYCHECK_MAX_VERSION_AHEAD: %w", err)
		}
	}
	if s := os.Getenv("DELIVERYCHECK_AUTHORITY"); s != "" {
		a.may = map[string][]string{}
		for entry := range strings.SplitSeq(s, ";") {
			src, types, ok := strings.Cut(entry, "=")
			if !ok {
				return a, fmt.Errorf("DELIVERYCHECK_AUTHORITY: %q is not source=Type,Type", entry)
			}
			a.may[src] = strings.Split(types, ",")
		}
	}
	return a, nil
}

// check returns why ev may not be applied, or "": the checks in the
// order docs/security.md gives, so the reason names the first that fails.
func (a authority) check(ctx context.Context, db *pgxpool.Pool, subscription string, ev event) (string, error) {
	if a.may != nil && !slices.Contains(a.may[ev.source], ev.typ) {
		return fmt.Sprintf("source %q may not emit %q", ev.source, ev.typ), nil
	}
	if a.tenant != "" && ev.tenant != a.tenant {
		return fmt.Sprintf("tenant %q is not this consumer's", ev.tenant), nil
	}
	if a.maxAhead > 0 {
		var applied int64
		if err := db.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM shop_stock_moves WHERE consumer = $1 AND order_id = $2`,
			subscription, ev.order).Scan(&applied); err != nil {
			return "", err
		}
		if ev.version-applied > a.maxAhead {
			return fmt.Sprintf("version %d is more than %d ahead of the applied %d", ev.version, a.maxAhead, applied), nil
		}
	}
	if a.freshness > 0 {
		t, err := time.Parse(time.RFC3339Nano, ev.time)
		if err != nil {
			return "missing or malformed time", nil
		}
		if time.Since(t) > a.freshness {
			return fmt.Sprintf("stale: event time %s is older than the %s freshness window", ev.time, a.freshness), nil
		}
	}
	if len(a.key) > 0 {
		if ev.signature == "" {
			return "missing signature", nil
		}
		// The one canonical form (docs/security.md), from the harness's
		// package: a team in another language renders the same bytes.
		if !signing.Verify(a.key, broker.Event{ID: ev.id, Source: ev.source, Type: ev.typ, Key: ev.order, Version: ev.version,
			Tenant: ev.tenant, Time: ev.time, Signature: ev.signature, Payload: ev.payload}) {
			return "signature does not verify", nil
		}
	}
	return "", nil
}

// reject records that the service turned ev away for reason
// (dead_letters_query reads it): the message is then acked, since no
// redelivery would make it acceptable. Every dead-lettering is a row of
// its own (the contract's redrive rule 3): an event dead-lettered again
// after a redrive is listed twice. No inbox mark: the inbox holds what
// was applied.
func reject(ctx context.Context, db *pgxpool.Pool, subscription string, ev event, reason string) error {
	_, err := db.Exec(ctx, `INSERT INTO shop_rejected (consumer, event_id, reason) VALUES ($1, $2, $3)`,
		subscription, ev.id, reason)
	return err
}

// apply turns m away if it is over a limit (limits.go) or not authorized,
// else applies it. It returns the event and the reason of a rejection, ""
// when applied (or already applied); an *unsupported error when this
// build does not know its schema version (the caller gives it back, or
// dead-letters it at its last delivery).
func apply(ctx context.Context, db *pgxpool.Pool, cfg config, m message) (event, string, error) {
	ev, reason := inspect(m)
	if reason == "" {
		if err := checkSchema(ev, cfg.schemas); err != nil {
			return ev, "", err
		}
	}
	if reason == "" {
		var err error
		if reason, err = cfg.authority.check(ctx, db, cfg.subscription, ev); err != nil {
			return ev, "", err
		}
	}
	if reason != "" {
		reason = broker.SafeText(reason) // it may cite a hostile value
		return ev, reason, reject(ctx, db, cfg.subscription, ev, reason)
	}
	return ev, "", handle(ctx, db, cfg.subscription, ev)
}
