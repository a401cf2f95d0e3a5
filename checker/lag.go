package checker

import (
	"errors"
	"time"

	"github.com/deliverycheck/deliverycheck/history"
)

// Lag is the consumer lag sampled during a run (docs/results.md, "Lag").
type Lag struct{}

// LagAlert is an alert on a subscription's consumer lag, as Prometheus
// would evaluate `lag > Threshold for For`.
type LagAlert struct {
	Threshold int64         `json:"threshold" yaml:"threshold"`
	For       time.Duration `json:"for" yaml:"for"`
}

// ParseLagAlert parses "100/1s" (threshold/for).
func ParseLagAlert(s string) (*LagAlert, error) {
	return nil, errors.New("checker: lag alert: not yet")
}

// lagAcc keeps the lag samples, on shard 0.
type lagAcc struct{}

func (l *lagAcc) op(op *history.Op) {}

// lagSection fills r.Lag.
func (a *analyzer) lagSection(v *view, r *Result) {}
