package scenarios

import (
	"fmt"
	"strconv"

	"gopkg.in/yaml.v3"
)

// The file shape, in the order a scenario is written. Every field is
// written, defaults included, so a marshaled scenario says everything a
// run will do (results.json and the report can embed it as is).
type fileScenario struct {
	Name        string         `yaml:"name"`
	Description string         `yaml:"description,omitempty"`
	Broker      fileBroker     `yaml:"broker"`
	Variants    fileVariants   `yaml:"variants"`
	Workload    fileWorkload   `yaml:"workload"`
	Nemesis     fileNemesis    `yaml:"nemesis"`
	Guarantees  fileGuarantees `yaml:"guarantees"`
	Drain       fileDrain      `yaml:"drain"`
	Expect      *fileExpect    `yaml:"expect,omitempty"`
	Images      *fileImages    `yaml:"images,omitempty"`
	Seed        uint64         `yaml:"seed"`
}

type fileImages struct {
	Postgres string `yaml:"postgres,omitempty"`
	Kafka    string `yaml:"kafka,omitempty"`
	RabbitMQ string `yaml:"rabbitmq,omitempty"`
}

type fileBroker struct {
	Kind        string   `yaml:"kind"`
	Partitions  int32    `yaml:"partitions"`
	MaxAttempts int64    `yaml:"max_attempts"`
	Unbound     []string `yaml:"unbound,omitempty"`
	Prefetch    int      `yaml:"prefetch,omitempty"`
}

type fileVariants struct {
	Producer string `yaml:"producer"`
	Relay    string `yaml:"relay"`
	Consumer string `yaml:"consumer"`
}

type fileWorkload struct {
	Duration        string   `yaml:"duration"`
	Producers       int      `yaml:"producers"`
	ProducerProcs   int      `yaml:"producer_processes,omitempty"`
	Rate            float64  `yaml:"rate"`
	Keys            int      `yaml:"keys"`
	PoisonRatio     float64  `yaml:"poison_ratio"`
	AbortRatio      float64  `yaml:"abort_ratio"`
	Subscriptions   []string `yaml:"subscriptions"`
	Consumers       int      `yaml:"consumers"`
	ConsumerWorkers int      `yaml:"consumer_workers"`
	ConsumerWork    string   `yaml:"consumer_work,omitempty"`
	Relays          int      `yaml:"relays"`
	RelayBatch      int      `yaml:"relay_batch"`
}

type fileNemesis struct {
	Timeline     []string            `yaml:"timeline,omitempty"`
	Random       *fileRandom         `yaml:"random,omitempty"`
	Failpoints   map[string][]string `yaml:"failpoints,omitempty"`
	RestartDelay string              `yaml:"restart_delay,omitempty"`
}

type fileRandom struct {
	Families   []string `yaml:"families"`
	Interval   string   `yaml:"interval"`
	SeedOffset uint64   `yaml:"seed_offset,omitempty"`
	Targets    []string `yaml:"targets,omitempty"`
}

type fileGuarantees struct {
	Loss             string   `yaml:"loss"`
	DuplicateEffects string   `yaml:"duplicate-effects"`
	Order            string   `yaml:"order"`
	Gaps             string   `yaml:"gaps"`
	Subscriptions    []string `yaml:"subscriptions,omitempty"`
}

type fileDrain struct {
	Timeout string `yaml:"timeout"`
	Quiet   string `yaml:"quiet"`
}

type fileExpect struct {
	Verdict string `yaml:"verdict,omitempty"`
	Anomaly string `yaml:"anomaly,omitempty"`
}

// MarshalYAML writes the scenario in the file format [Parse] reads, every
// field explicit; Parse of the result gives the same Scenario.
func (s Scenario) MarshalYAML() (any, error) {
	g := s.Guarantees.Normalize()
	f := fileScenario{
		Name:        s.Name,
		Description: s.Description,
		Broker:      fileBroker{Kind: s.Broker.Kind, Partitions: s.Broker.Partitions, MaxAttempts: s.Broker.MaxAttempts, Unbound: s.Broker.Unbound, Prefetch: s.Broker.Prefetch},
		Variants:    fileVariants{Producer: string(s.Variants.Producer), Relay: string(s.Variants.Relay), Consumer: string(s.Variants.Consumer)},
		Workload: fileWorkload{
			Duration: s.Workload.Duration.String(), Producers: s.Workload.Producers, ProducerProcs: s.Workload.ProducerProcesses, Rate: s.Workload.Rate,
			Keys: s.Workload.Keys, PoisonRatio: s.Workload.PoisonRatio, AbortRatio: s.Workload.AbortRatio,
			Subscriptions: s.Workload.Subscriptions, Consumers: s.Workload.Consumers,
			ConsumerWorkers: s.Workload.ConsumerWorkers, Relays: s.Workload.Relays, RelayBatch: s.Workload.RelayBatch,
		},
		Nemesis:    fileNemesis{Failpoints: s.Nemesis.Failpoints},
		Guarantees: fileGuarantees{Loss: string(g.Loss), DuplicateEffects: string(g.DuplicateEffects), Order: string(g.Order), Gaps: string(g.Gaps), Subscriptions: s.Guarantees.Subscriptions},
		Drain:      fileDrain{Timeout: s.Drain.Timeout.String(), Quiet: s.Drain.Quiet.String()},
		Seed:       s.Seed,
	}
	for _, st := range s.Nemesis.Timeline {
		f.Nemesis.Timeline = append(f.Nemesis.Timeline, st.String())
	}
	if r := s.Nemesis.Random; r != nil {
		f.Nemesis.Random = &fileRandom{Families: r.Families, Interval: r.Interval.String(), SeedOffset: r.SeedOffset, Targets: r.Targets}
	}
	if s.Workload.ConsumerWork > 0 {
		f.Workload.ConsumerWork = s.Workload.ConsumerWork.String()
	}
	if s.Nemesis.RestartDelay > 0 {
		f.Nemesis.RestartDelay = s.Nemesis.RestartDelay.String()
	}
	if s.Expect != (Expect{}) {
		f.Expect = &fileExpect{Verdict: string(s.Expect.Verdict), Anomaly: string(s.Expect.Anomaly)}
	}
	if s.Images != (Images{}) {
		f.Images = &fileImages{Postgres: s.Images.Postgres, Kafka: s.Images.Kafka, RabbitMQ: s.Images.RabbitMQ}
	}
	return f, nil
}

// Marshal renders the scenario as a YAML file.
func (s Scenario) Marshal() ([]byte, error) {
	out, err := yaml.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("scenarios: marshal %s: %w", strconv.Quote(s.Name), err)
	}
	return out, nil
}
