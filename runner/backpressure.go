package runner

import (
	"cmp"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/pipeline"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
	"github.com/deliverycheck/deliverycheck/reports"
)

// recordLoad puts in the run record what the backlog report sets beside
// its figures: the rate timeline as the producers follow it (on the
// history's clock), the consumers' prefetch window and batch.
func recordLoad(meta *reports.Record, cfg pipeline.Config, steps []producer.RateStep) {
	for _, s := range steps {
		meta.Load = append(meta.Load, reports.LoadStep{AtNS: s.AtNS, Rate: s.Rate, ForNS: s.ForNS})
	}
	if cfg.Broker == "rabbitmq" {
		meta.Prefetch = cmp.Or(cfg.Prefetch, broker.DefaultPrefetch)
	}
	meta.ConsumerBatch = cfg.ConsumerBatch
}
