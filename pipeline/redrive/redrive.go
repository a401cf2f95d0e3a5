// Package redrive republishes a subscription's dead letters to it at a
// limited rate, as an operator does once a fix is deployed (issue 25,
// docs/pipeline.md "Dead-letter redrive"). Its known-bad variants are
// the two ways a redrive goes wrong that the seeds name: changing the
// id to force processing, and emptying the queue before the fix.
package redrive

import "github.com/deliverycheck/deliverycheck/internal/choice"

// Variant is how a redrive goes about it.
type Variant string

// The redrive variants.
const (
	// Canary is correct: it redrives only the dead letters the
	// subscription's consumers now accept, the first alone, and the
	// rest only once that one was applied; each under its own id.
	Canary Variant = "canary"
	// NewIDs is known-bad: as Canary, but each dead letter republished
	// under a fresh id, so a dead letter sent twice is applied twice.
	NewIDs Variant = "new-ids"
	// Blind is known-bad: it republishes every dead letter at the rate,
	// fix or no fix, without a canary.
	Blind Variant = "blind"
)

// Variants lists every redrive variant.
func Variants() []Variant { return []Variant{Canary, NewIDs, Blind} }

// ParseVariant checks a variant name.
func ParseVariant(s string) (Variant, error) {
	return choice.Parse(s, Variants(), "redrive: unknown variant")
}

// Config tunes one redriver process.
type Config struct {
	// Variant is the redriver, Canary unless told otherwise.
	Variant Variant `json:"variant"`
	// Subscription is whose dead letters it redrives.
	Subscription string `json:"subscription"`
	// Rate is the most dead letters it republishes per second.
	Rate int64 `json:"rate"`
	// SchemaVersions are the schema versions the subscription's
	// consumers accept now (what Canary classifies by).
	SchemaVersions []int64 `json:"schema_versions,omitempty"`
	// DeadLetters is how many the dead-letter queue held when the step
	// started: what the evidence counts against, and half the most it
	// republishes (a blind redrive before the fix gets them all back).
	DeadLetters int `json:"dead_letters"`
	// Since is the step's start, in ns since the run's base: its
	// earlier incarnations' redrive ops are the ones from then on.
	Since int64 `json:"since"`
	// EffectsQuery and DeadLettersQuery are a team's consumers' (the
	// contract's effects_query and dead_letters_query), read for the
	// canary's outcome; "" reads the built-in tables.
	EffectsQuery     string `json:"effects_query,omitempty"`
	DeadLettersQuery string `json:"dead_letters_query,omitempty"`
}
