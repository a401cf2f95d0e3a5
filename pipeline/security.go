package pipeline

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deliverycheck/deliverycheck/pipeline/consumer"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
	"github.com/deliverycheck/deliverycheck/pipeline/relay"
	"github.com/deliverycheck/deliverycheck/pipeline/worker"
)

// The environment of a team's relay and consumers when the run has a
// security section (docs/contract.md, docs/security.md): each only when
// configured.
const (
	EnvSigningKey      = "DELIVERYCHECK_SIGNING_KEY"       // hex; relay signs, consumers verify
	EnvTenant          = "DELIVERYCHECK_TENANT"            // relay sends it, consumers reject any other
	EnvFreshness       = "DELIVERYCHECK_FRESHNESS"         // consumers: Go duration, e.g. 10m0s
	EnvMaxVersionAhead = "DELIVERYCHECK_MAX_VERSION_AHEAD" // consumers: decimal
	EnvAuthority       = "DELIVERYCHECK_AUTHORITY"         // consumers: /orders=OrderConfirmed;/returns=A,B
)

// Security is the run's event authority (docs/security.md): what the
// relay stamps on every event and what correct consumers check. A nil
// *Security in Config is none: no tenant, time or signature header, and
// consumers check the default authority only.
type Security struct {
	// Sign makes the run mint a 32-byte random signing key: the relay
	// signs every event with it and consumers verify.
	Sign bool
	// Tenant is the run's tenant, "" for none.
	Tenant string
	// Freshness is the oldest an event may be when a consumer takes it,
	// 0 for no check.
	Freshness time.Duration
	// MaxVersionAhead is how far past its aggregate's applied version an
	// event may be, 0 for no check.
	MaxVersionAhead int64
	// Authority lists the event types each source may emit, overriding
	// the default: every source of the workload (Config.Sources, or the
	// producer's default) may emit producer.EventType only.
	Authority map[string][]string
}

// authority is the resolved authority: Security.Authority, or the
// default over the run's sources.
func (c Config) authority() map[string][]string {
	if c.Security != nil && c.Security.Authority != nil {
		return c.Security.Authority
	}
	sources := c.Sources
	if len(sources) == 0 {
		sources = []string{producer.DefaultSource}
	}
	out := make(map[string][]string, len(sources))
	for _, s := range sources {
		out[s] = []string{producer.EventType}
	}
	return out
}

// mintKey makes the run's signing key when it signs.
func (r *Deployment) mintKey() error {
	if r.cfg.Security == nil || !r.cfg.Security.Sign {
		return nil
	}
	r.key = make([]byte, 32)
	if _, err := rand.Read(r.key); err != nil {
		return fmt.Errorf("pipeline: signing key: %w", err)
	}
	return nil
}

// SigningKey is the run's signing key, nil when the run does not sign
// (for a fault that must sign as the relay did: the intruder's replay).
func (r *Deployment) SigningKey() []byte { return slices.Clone(r.key) }

// relayAuthority is what the built-in relay stamps, nil without security.
func (r *Deployment) relayAuthority() *relay.Authority {
	if r.cfg.Security == nil {
		return nil
	}
	return &relay.Authority{Tenant: r.cfg.Security.Tenant, Key: slices.Clone(r.key)}
}

// consumerSecurity is what the built-in consumers check.
func (r *Deployment) consumerSecurity() consumer.Security {
	s := consumer.Security{Authority: r.cfg.authority()}
	if sec := r.cfg.Security; sec != nil {
		s.Key, s.Tenant, s.Freshness, s.MaxVersionAhead = slices.Clone(r.key), sec.Tenant, sec.Freshness, sec.MaxVersionAhead
	}
	return s
}

// securityEnv adds a team component's share of the run's security to
// env: the relay's signing key and tenant, the consumers' every check.
func (r *Deployment) securityEnv(env map[string]string, role string) {
	sec := r.cfg.Security
	if sec == nil || (role != worker.RoleRelay && role != worker.RoleConsumer) {
		return
	}
	if len(r.key) > 0 {
		env[EnvSigningKey] = hex.EncodeToString(r.key)
	}
	if sec.Tenant != "" {
		env[EnvTenant] = sec.Tenant
	}
	if role != worker.RoleConsumer {
		return
	}
	if sec.Freshness > 0 {
		env[EnvFreshness] = sec.Freshness.String()
	}
	if sec.MaxVersionAhead > 0 {
		env[EnvMaxVersionAhead] = strconv.FormatInt(sec.MaxVersionAhead, 10)
	}
	env[EnvAuthority] = FormatAuthority(r.cfg.authority())
}

// FormatAuthority writes an authority as DELIVERYCHECK_AUTHORITY carries
// it: source=Type,Type;source=Type, sources in order.
func FormatAuthority(a map[string][]string) string {
	parts := make([]string, 0, len(a))
	for _, src := range slices.Sorted(maps.Keys(a)) {
		parts = append(parts, src+"="+strings.Join(a[src], ","))
	}
	return strings.Join(parts, ";")
}
