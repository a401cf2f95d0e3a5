package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
	"github.com/deliverycheck/deliverycheck/signing"
)

// AdminGranted is an event type the consumer understands but no workload
// source may emit (the default authority allows producer.EventType only):
// a forged one is well-formed, so only the authority check stands between
// it and an effect (the intruder's "type" kind sends it).
const AdminGranted = "AdminGranted"

// KnownTypes are the event types the consumer understands; any other is
// an "unknown type", a well-formedness failure.
func KnownTypes() []string { return []string{producer.EventType, AdminGranted} }

// Security is what the consumer demands of a well-formed event before it
// applies it: who may emit it, whose it is, how far ahead and how old it
// may be, and its signature (docs/security.md, "The relay and consumer").
// The zero value checks the authority only, with the default (every
// source may emit producer.EventType only).
type Security struct {
	// Key is the run's signing key; when set, every event must carry a
	// signature that verifies under it.
	Key []byte `json:"key,omitempty"`
	// Tenant is the run's tenant; when set, an event of another tenant
	// (or of none) is rejected.
	Tenant string `json:"tenant,omitempty"`
	// Freshness is the oldest an event's time header may be; 0 is no
	// check.
	Freshness time.Duration `json:"freshness,omitempty"`
	// MaxVersionAhead is how far past the version applied to its
	// aggregate (0 if none) an event's version may be; 0 is no check.
	MaxVersionAhead int64 `json:"max_version_ahead,omitempty"`
	// Authority lists the event types each source may emit; nil means
	// every source may emit producer.EventType only.
	Authority map[string][]string `json:"authority,omitempty"`
}

// checksAuthority reports whether the consumer's variant checks an
// event's authority at all: every variant but the trusting one, whose
// one flaw is not to.
func (c *Consumer) checksAuthority() bool { return c.cfg.Variant != Trusting }

// mayEmit reports whether source may emit events of type typ.
func (s Security) mayEmit(source, typ string) bool {
	if s.Authority == nil {
		return typ == producer.EventType
	}
	return slices.Contains(s.Authority[source], typ)
}

// authorityBeforeVersion is the checks that come before the version
// check: authority, then tenant. "" means d passed them.
func (s Security) authorityBeforeVersion(d *broker.Delivery) string {
	if !s.mayEmit(d.Source, d.Type) {
		return "source " + strconv.QuoteToASCII(truncate(d.Source, 128)) + " may not emit " + strconv.QuoteToASCII(truncate(d.Type, 64))
	}
	if s.Tenant != "" && d.Tenant != s.Tenant {
		return "tenant " + strconv.QuoteToASCII(truncate(d.Tenant, 64)) + " is not this consumer's"
	}
	return ""
}

// versionAhead is the version check against applied, the version applied
// to d's aggregate (0 if none).
func (s Security) versionAhead(d *broker.Delivery, applied int64) string {
	if s.MaxVersionAhead > 0 && d.Version-applied > s.MaxVersionAhead {
		return fmt.Sprintf("version %d is more than %d ahead of the applied %d", d.Version, s.MaxVersionAhead, applied)
	}
	return ""
}

// authorityAfterVersion is the checks that come after the version check:
// freshness at now, then the signature.
func (s Security) authorityAfterVersion(d *broker.Delivery, now time.Time) string {
	if s.Freshness > 0 {
		t, err := time.Parse(time.RFC3339Nano, d.Time)
		if err != nil {
			return "missing or malformed time"
		}
		if now.Sub(t) > s.Freshness {
			return "stale: event time " + truncate(d.Time, 64) + " is older than the " + s.Freshness.String() + " freshness window"
		}
	}
	if len(s.Key) > 0 {
		if d.Signature == "" {
			return "missing signature"
		}
		if !signing.Verify(s.Key, d.Event) {
			return "signature does not verify"
		}
	}
	return ""
}

// versions caches, per aggregate, a version known to be applied: a lower
// bound of the projection's (which, version-guarded, never goes back), so
// a delivery within MaxVersionAhead of it passes the version check
// without a query. The batch path takes only such deliveries; any other
// comes alone and [Consumer.appliedVersion] reads the projection.
type versions struct {
	mu sync.Mutex
	m  map[string]int64
}

func (v *versions) get(key string) int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.m[key]
}

func (v *versions) raise(key string, version int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil {
		v.m = map[string]int64{}
	}
	if version > v.m[key] {
		v.m[key] = version
	}
}

// noteApplied raises the cache to the versions a committed transaction
// applied (only with the version check: nothing else reads it).
func (c *Consumer) noteApplied(ds []*broker.Delivery, outs []outcome) {
	if c.cfg.Security.MaxVersionAhead <= 0 {
		return
	}
	for i, o := range outs {
		if o == applied {
			c.known.raise(ds[i].Key, ds[i].Version)
		}
	}
}

// authorizedWithoutQuery reports whether d, well-formed, certainly passes
// every authority check, without reading the database: the batch path's
// test. A delivery it refuses is handled alone, by [Consumer.authorize].
func (c *Consumer) authorizedWithoutQuery(d *broker.Delivery) bool {
	if !c.checksAuthority() {
		return true
	}
	s := c.cfg.Security
	return s.authorityBeforeVersion(d) == "" &&
		s.versionAhead(d, c.known.get(d.Key)) == "" &&
		s.authorityAfterVersion(d, time.Now()) == ""
}

// authorize returns why d, well-formed, is not authorized (the first
// check that fails, in the order of docs/security.md), or "". Its error is
// only ctx ending while it waited for the database.
func (c *Consumer) authorize(ctx context.Context, d *broker.Delivery) (string, error) {
	if !c.checksAuthority() {
		return "", nil
	}
	s := c.cfg.Security
	if r := s.authorityBeforeVersion(d); r != "" {
		return r, nil
	}
	if s.MaxVersionAhead > 0 {
		applied := c.known.get(d.Key)
		if s.versionAhead(d, applied) != "" {
			var err error
			if applied, err = c.appliedVersion(ctx, d.Key); err != nil {
				return "", err
			}
		}
		if r := s.versionAhead(d, applied); r != "" {
			return r, nil
		}
	}
	return s.authorityAfterVersion(d, time.Now()), nil
}

// appliedVersion reads the version applied to aggregate key in this
// subscription's projection (0 if none), retrying transient errors until
// ctx ends, and raises the cache to it.
func (c *Consumer) appliedVersion(ctx context.Context, key string) (int64, error) {
	for attempt := 0; ; attempt++ {
		var v int64
		err := c.db.QueryRow(ctx, `SELECT version FROM projection WHERE consumer = $1 AND aggregateid = $2`, c.cfg.Subscription, key).Scan(&v)
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, nil
		}
		if err == nil {
			c.known.raise(key, v)
			return v, nil
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("applied version of %s: %w", key, ctx.Err())
		}
		c.sleep(ctx, attempt)
	}
}
