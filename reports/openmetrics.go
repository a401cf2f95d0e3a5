package reports

// The run's sampled consumer lag as an OpenMetrics text file (issue 25,
// the appendix's exercise 5: the lag a consumer group's Prometheus metric
// would have shown), so the run's curves can be backfilled into a
// Prometheus and graphed or alerted on there:
//
//	promtool tsdb create-blocks-from openmetrics lag.om.txt ./data
//
// prometheus/common's expfmt writes OpenMetrics but reads only the older
// text format, and the file is a few lines: it is written here.

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/deliverycheck/deliverycheck/checker"
)

// LagFile is the name of the OpenMetrics file in the run folder.
const LagFile = "lag.om.txt"

// The metric families of LagFile.
const (
	MetricConsumerLag = "deliverycheck_consumer_lag"
	MetricDLQDepth    = "deliverycheck_dlq_depth"
)

// WriteOpenMetrics writes res's lag samples (checker.Lag) as OpenMetrics
// text: a gauge family for the lag of each subscription on each
// partition (Kafka: labels subscription, group, topic, partition) or
// queue (RabbitMQ: subscription, queue), one for each dead-letter queue's
// depth, every sample with its timestamp in seconds since the Unix epoch
// (the run's start plus the sample's time), and "# EOF". A result without
// lag samples gives the families' metadata alone.
func WriteOpenMetrics(w io.Writer, run Record, res *checker.Result) error {
	var lag, dlq []checker.LagSeries
	if res != nil && res.Lag != nil {
		lag, dlq = res.Lag.Series, res.Lag.DLQ
	}
	start := run.Started.UnixMilli()
	if run.Started.IsZero() {
		start = 0
	}
	bw := bufio.NewWriter(w)
	writeFamily(bw, MetricConsumerLag, "Records (Kafka) or ready messages (RabbitMQ) a subscription has not consumed.", lag, start)
	writeFamily(bw, MetricDLQDepth, "Messages waiting in a subscription's dead-letter queue (RabbitMQ).", dlq, start)
	bw.WriteString("# EOF\n")
	return bw.Flush()
}

// writeFamily writes one gauge family, each series' samples together
// and in time order (a sample in the same millisecond as the one before
// is left out: OpenMetrics wants timestamps to increase).
func writeFamily(w *bufio.Writer, name, help string, series []checker.LagSeries, startMs int64) {
	fmt.Fprintf(w, "# TYPE %s gauge\n# HELP %s %s\n", name, name, escapeLabel(help))
	for _, s := range series {
		labels := seriesLabels(s)
		last := int64(-1)
		for _, smp := range s.Samples {
			ms := startMs + smp[0]/1e6
			if ms <= last {
				continue
			}
			last = ms
			fmt.Fprintf(w, "%s{%s} %d %s\n", name, labels, smp[1], formatSeconds(ms))
		}
	}
}

// seriesLabels are a series' labels, in OpenMetrics' syntax.
func seriesLabels(s checker.LagSeries) string {
	pairs := [][2]string{{"subscription", s.Subscription}}
	if s.Topic != "" {
		pairs = append(pairs, [2]string{"group", s.Target}, [2]string{"topic", s.Topic})
		if s.Partition != nil {
			pairs = append(pairs, [2]string{"partition", strconv.FormatInt(*s.Partition, 10)})
		}
	} else {
		pairs = append(pairs, [2]string{"queue", s.Target})
	}
	parts := make([]string, len(pairs))
	for i, p := range pairs {
		parts[i] = p[0] + `="` + escapeLabel(p[1]) + `"`
	}
	return strings.Join(parts, ",")
}

// formatSeconds writes ms milliseconds as seconds with three decimals.
func formatSeconds(ms int64) string {
	return strconv.FormatInt(ms/1000, 10) + "." + fmt.Sprintf("%03d", ms%1000)
}

// escapeLabel escapes a label value or a HELP text as OpenMetrics asks:
// backslash, double quote, newline.
func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}
