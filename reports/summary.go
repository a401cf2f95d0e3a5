package reports

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/deliverycheck/deliverycheck/checker"
)

// summary is the verdict banner's one sentence: what held, what did not,
// and what could not be established.
func summary(run Record, res *checker.Result, checks []Check) string {
	if res == nil {
		return fmt.Sprintf("The harness failed before there was a history to check (%s), so no guarantee was tested.", oneLine(run.HarnessError))
	}
	judged := Judge(run, res)
	var broken, held, unknown []string
	brokenIn := map[string][]string{}
	status := map[string][]Status{}
	var order []string
	for _, c := range checks {
		if !c.Promised {
			continue
		}
		if _, ok := status[c.Guarantee]; !ok {
			order = append(order, c.Guarantee)
		}
		status[c.Guarantee] = append(status[c.Guarantee], c.Status)
		if c.Status == Broken {
			brokenIn[c.Guarantee] = append(brokenIn[c.Guarantee], fmt.Sprintf("%s (%d %s)", c.Subscription, c.Count, c.Kind))
		}
	}
	for _, g := range order {
		switch {
		case len(brokenIn[g]) > 0:
			broken = append(broken, g+" broke in "+joinAnd(brokenIn[g]))
		case slices.Contains(status[g], NotEstablished):
			unknown = append(unknown, g)
		default:
			held = append(held, g)
		}
	}
	c := res.Counts
	scale := plural(c.Committed, "event") + " committed, " + plural(c.Faults, "fault") + ", " + plural(c.Crashes, "crash")
	var b strings.Builder
	switch {
	case len(broken) > 0:
		b.WriteString(capitalize(strings.Join(broken, "; ")))
		if len(held) > 0 {
			fmt.Fprintf(&b, ", while %s held", joinAnd(held))
		}
		if len(unknown) > 0 {
			fmt.Fprintf(&b, ", and %s could not be established", joinAnd(unknown))
		}
	case judged.Validity == checker.Valid:
		subs := make([]string, 0, len(res.Subscriptions))
		for _, s := range res.Subscriptions {
			subs = append(subs, s.Name)
		}
		fmt.Fprintf(&b, "Every promised guarantee held in %s: %s", joinAnd(subs), joinAnd(held))
	default:
		why := "the facts were not established"
		if run.HarnessError != "" {
			why = "the harness failed (" + oneLine(run.HarnessError) + ")"
		} else if len(judged.Reasons) > 0 {
			why = judged.Reasons[0]
		}
		fmt.Fprintf(&b, "Unknown: %s", why)
		if len(unknown) > 0 {
			fmt.Fprintf(&b, ", so %s could not be established although no forbidden anomaly was found", joinAnd(unknown))
		}
		if len(held) > 0 {
			fmt.Fprintf(&b, "; %s held", joinAnd(held))
		}
	}
	fmt.Fprintf(&b, " (%s).", scale)
	if st := res.TxnStage; st != nil && st.Boundary != "" {
		fmt.Fprintf(&b, " Transactional stage: %s.", st.Boundary)
	}
	return b.String()
}

// joinAnd joins "a", "a and b", "a, b and c".
func joinAnd(xs []string) string {
	switch len(xs) {
	case 0:
		return "nothing"
	case 1:
		return xs[0]
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " and " + xs[len(xs)-1]
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// oneLine keeps the first line of s, cut to at most 300 bytes at a rune
// boundary (a cut through a rune would leave bytes that are not UTF-8).
func oneLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 300 {
		i := 300
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		s = s[:i] + "…"
	}
	return s
}

// plural formats "1 crash", "2 crashes", "3 events".
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "sh") || strings.HasSuffix(noun, "s") {
		return fmt.Sprintf("%d %ses", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
