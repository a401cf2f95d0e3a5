package scenarios

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/deliverycheck/deliverycheck/pipeline/producer"
)

// RateStep is one step of workload.rate_timeline: from At (since the
// workload's start, as the nemesis timeline's steps) every producer runs
// at Rate ops per second, for For and then back to workload.rate, or
// (For 0) until the next step or the workload's end. Written "at 0.5s:
// 150/s for 2s".
type RateStep struct {
	At   time.Duration
	Rate float64
	For  time.Duration
}

// String writes s as ParseRateStep reads it.
func (s RateStep) String() string {
	out := "at " + s.At.String() + ": " + strconv.FormatFloat(s.Rate, 'g', -1, 64) + "/s"
	if s.For > 0 {
		out += " for " + s.For.String()
	}
	return out
}

var rateStepRe = regexp.MustCompile(`^at\s+(\S+)\s*:\s*(\S+?)\s*/\s*s(?:\s+for\s+(\S+))?$`)

// ParseRateStep reads a rate step such as "at 0.5s: 150/s for 2s" or
// "at 4s: 80/s".
func ParseRateStep(text string) (RateStep, error) {
	m := rateStepRe.FindStringSubmatch(strings.TrimSpace(text))
	if m == nil {
		return RateStep{}, fmt.Errorf("cannot read rate step %q (want \"at <time>: <ops>/s [for <duration>]\", e.g. \"at 0.5s: 150/s for 2s\")", text)
	}
	at, err := time.ParseDuration(m[1])
	if err != nil || at < 0 {
		return RateStep{}, fmt.Errorf("rate step %q: want a time ≥ 0 such as 0.5s, got %q", text, m[1])
	}
	rate, err := strconv.ParseFloat(m[2], 64)
	if err != nil || !(rate > 0) || rate > 1e6 {
		return RateStep{}, fmt.Errorf("rate step %q: want ops per second > 0 such as 150/s, got %q", text, m[2]+"/s")
	}
	var d time.Duration
	if m[3] != "" {
		if d, err = time.ParseDuration(m[3]); err != nil || d <= 0 {
			return RateStep{}, fmt.Errorf("rate step %q: want a window > 0 such as 2s after for, got %q", text, m[3])
		}
	}
	return RateStep{At: at, Rate: rate, For: d}, nil
}

// rateTimeline is the file form of workload.rate_timeline: a list of
// steps written as ParseRateStep reads them. An unquoted step ("- at 1s:
// 150/s") is a one-key mapping to YAML; it is read back as the line it
// was meant to be, as nemesis timeline steps are.
type rateTimeline []RateStep

func (tl *rateTimeline) decodeNode(d *decoder, n *yaml.Node, path string, _ field) {
	var steps rateTimeline
	ok := d.stepLines(n, path, "rate step", "at 0.5s: 150/s for 2s", func(it *yaml.Node, p, text string) bool {
		st, err := ParseRateStep(text)
		if err != nil {
			d.fail(it, p, "%s", err)
			return false
		}
		steps = append(steps, st)
		return true
	})
	if ok {
		*tl = steps
	}
}

func (tl rateTimeline) encodeNode() any {
	out := make([]string, len(tl))
	for i, st := range tl {
		out[i] = st.String()
	}
	return out
}

func (rateTimeline) jsonSchema(map[string]any) map[string]any {
	step := map[string]any{"type": "string", "pattern": `^\s*at\s+\S+\s*:\s*\S+?\s*/\s*s(\s+for\s+\S+)?\s*$`}
	unquoted := map[string]any{
		"type": "object", "minProperties": 1, "maxProperties": 1,
		"propertyNames": map[string]any{"pattern": `^\s*at\s+\S+$`}, "additionalProperties": map[string]any{"type": "string"},
	}
	return map[string]any{"anyOf": []any{
		map[string]any{"type": "null"}, step,
		map[string]any{"type": "array", "items": map[string]any{"anyOf": []any{step, unquoted}}},
	}}
}

// producerRateSteps are the rate timeline for pipeline.Config: times from
// the workload's start (pipeline.Start moves them onto the run's clock).
func (s Scenario) producerRateSteps() []producer.RateStep {
	var out []producer.RateStep
	for _, st := range s.Workload.RateTimeline {
		out = append(out, producer.RateStep{AtNS: int64(st.At), Rate: st.Rate, ForNS: int64(st.For)})
	}
	return out
}
