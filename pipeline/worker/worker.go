// Package worker is the body of one pipeline process (`deliverycheck
// worker`): a producer, a relay, a consumer or a transactional processor, started by the supervisor
// with a [Spec], recording everything it does in its own history file.
//
// It reads commands on stdin: "arm <term>" arms a failpoint (see package
// failpoint), "zombie <failpoint>" a zombie pause there (the nemesis's
// zombie fault; "zombie off" disarms it), "stop" stops it gracefully.
// When stdin closes (the harness died) it exits, so a worker never
// outlives its harness. When an armed
// failpoint fires it records a crash op naming the failpoint and the event
// in flight, then SIGKILLs itself.
package worker

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/pipeline/consumer"
	"github.com/deliverycheck/deliverycheck/pipeline/processor"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
	"github.com/deliverycheck/deliverycheck/pipeline/redrive"
	"github.com/deliverycheck/deliverycheck/pipeline/relay"
)

// Roles.
const (
	RoleProducer = "producer"
	RoleRelay    = "relay"
	RoleConsumer = "consumer"
	// RoleProcessor is the transactional stage's processor (Kafka only).
	RoleProcessor = "processor"
	// RoleRedrive is the redriver of one subscription's dead letters
	// (issue 25), run once by a redrive step.
	RoleRedrive = "redrive"
)

// Spec is everything one worker process needs, passed as JSON.
type Spec struct {
	Role    string `json:"role"`
	Process string `json:"process"` // its name in the history
	History string `json:"history"` // its history file
	// BaseUnixNano is the run's start; every process times ops from it.
	BaseUnixNano int64  `json:"base_unix_nano"`
	Seed         uint64 `json:"seed"`

	PostgresDSN string `json:"postgres_dsn"`
	// PoolSize bounds the worker's PostgreSQL connections, overriding the
	// default 4.
	PoolSize int32  `json:"pool_size"`
	Broker   Broker `json:"broker"`

	Producer producer.Config `json:"producer"`
	// Clients are further producer clients this process runs next to its
	// own (Process, History, Producer): each its own history process with
	// its own connection, all sharing the process, so a crash takes them
	// down together. One process driving several clients is how pgbench
	// drives its clients; a Go process per client costs more CPU than the
	// database work of its transaction on a small machine.
	Clients  []Client        `json:"clients,omitempty"`
	Relay    relay.Config    `json:"relay"`
	Consumer consumer.Config `json:"consumer"`
	// Processor is the transactional processor's (RoleProcessor).
	Processor processor.Config `json:"processor,omitempty"`
	// Redrive is the redriver's (RoleRedrive).
	Redrive redrive.Config `json:"redrive,omitempty"`

	// Failpoints are armed before the worker starts working.
	Failpoints []string `json:"failpoints"`
}

// Client is one more producer client in a producer process: its name in
// the history, its history file and its seed.
type Client struct {
	Process string `json:"process"`
	History string `json:"history"`
	Seed    uint64 `json:"seed"`
}

// Run runs the worker described by spec until ctx ends, "stop" arrives on
// control, or control closes.
func Run(ctx context.Context, spec Spec, control io.Reader, log *slog.Logger) (err error) {
	// Producers and relays wait on the network nearly all the time: a
	// second P only adds scheduler threads competing for the machine's
	// cores with the servers and every other worker.
	if os.Getenv("GOMAXPROCS") == "" && (spec.Role == RoleProducer || spec.Role == RoleRelay || spec.Role == RoleProcessor) {
		runtime.GOMAXPROCS(1)
	}
	base := time.Unix(0, spec.BaseUnixNano)
	rec, err := history.NewRecorder(spec.History, spec.Process, base)
	if err != nil {
		return err
	}
	defer rec.Close()

	// Armed failpoints outlive the process: a term like kill(2) means two
	// crashes in all, not two per incarnation, so what is left of it is
	// kept next to the history file and reloaded after a restart.
	state := spec.History + ".failpoints"
	var fp *failpoint.Set
	fp = failpoint.NewSet(spec.Seed, func(n failpoint.Name, inFlight any) {
		_ = failpoint.WriteState(state, fp.Armed())
		failpoint.ReportHit(n)
		v, _ := inFlight.(history.Value)
		v.Target, v.Detail = spec.Process, "failpoint "+string(n)
		_, _ = rec.Record(history.Info, history.Crash, v)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way; nothing after a failpoint may run
	})
	terms, err := loadFailpoints(state, spec.Failpoints)
	if err != nil {
		return err
	}
	for _, t := range terms {
		fp.Arm(t)
	}
	if err := failpoint.WriteState(state, fp.Armed()); err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go readControl(control, fp, state, cancel, log)

	poolCfg, err := pgxpool.ParseConfig(spec.PostgresDSN)
	if err != nil {
		return fmt.Errorf("worker: postgres dsn: %w", err)
	}
	// Named in pg_stat_activity, so the database's view says which worker
	// holds a connection.
	poolCfg.ConnConfig.RuntimeParams["application_name"] = spec.Process
	poolCfg.MaxConns = 4
	switch spec.Role {
	case RoleProducer:
		// One connection per client.
		poolCfg.MaxConns = max(poolCfg.MaxConns, int32(1+len(spec.Clients)))
	case RoleConsumer:
		// One connection per delivery in flight, one for dead letters.
		poolCfg.MaxConns = max(poolCfg.MaxConns, int32(spec.Consumer.Workers)+1)
	}
	if spec.PoolSize > 0 {
		poolCfg.MaxConns = spec.PoolSize
	}
	db, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return fmt.Errorf("worker: postgres: %w", err)
	}
	defer db.Close()

	switch spec.Role {
	case RoleProducer:
		var pub publisherCloser
		if spec.Producer.Variant != producer.Outbox {
			if pub, err = openPublisher(ctx, spec.Broker, "confirmed"); err != nil {
				return err
			}
			defer pub.Close()
		}
		return runProducers(ctx, spec, base, db, rec, fp, pub)
	case RoleRelay:
		mode := "confirmed"
		switch spec.Relay.Variant {
		case relay.Unconfirmed:
			mode = "unconfirmed"
		case relay.Unroutable:
			mode = "unroutable"
		case relay.LeaderAck:
			mode = "leader-ack"
		case relay.Transient:
			mode = "transient"
		}
		pub, err := openPublisher(ctx, spec.Broker, mode)
		if err != nil {
			return err
		}
		defer pub.Close()
		r, err := relay.New(spec.Relay, db, pub, rec, fp)
		if err != nil {
			return err
		}
		return r.Run(ctx)
	case RoleConsumer:
		sub, err := openSubscriber(ctx, spec.Broker, spec.Consumer, rec)
		if err != nil {
			return err
		}
		defer sub.Close()
		c, err := consumer.New(spec.Consumer, db, sub, rec, fp)
		if err != nil {
			return err
		}
		return c.Run(ctx)
	case RoleProcessor:
		if spec.Broker.Kind != "kafka" {
			return fmt.Errorf("worker: the transactional processor needs Kafka, not %s", spec.Broker.Kind)
		}
		p, err := processor.New(spec.Processor, spec.Broker.Kafka(), rec, fp, log)
		if err != nil {
			return err
		}
		p.SetDatabase(db) // for its effect, if it writes one
		err = p.Run(ctx)
		if z, ok := errors.AsType[*processor.ZombieError](err); ok {
			// Replaced while paused: the nemesis learns how its late
			// transaction ended, and the process exits for good.
			failpoint.Note(z.Error())
			log.Info("replaced while paused: exiting", "outcome", z.Error())
			return nil
		}
		return err
	case RoleRedrive:
		return runRedrive(ctx, spec, db, rec, fp)
	}
	return fmt.Errorf("worker: unknown role %q (valid: producer, relay, consumer, processor, redrive)", spec.Role)
}

// runRedrive runs the redriver of spec.Redrive.Subscription once, its
// earlier incarnations' part of the redrive read back from its own
// history file (RabbitMQ only: Kafka's redriver is not yet written).
func runRedrive(ctx context.Context, spec Spec, db *pgxpool.Pool, rec *history.Recorder, fp *failpoint.Set) error {
	if spec.Broker.Kind != "rabbitmq" {
		return fmt.Errorf("worker: the redriver on %s is not yet written (RabbitMQ only)", spec.Broker.Kind)
	}
	prior, _, err := history.ReadFile(spec.History)
	if err != nil {
		return fmt.Errorf("worker: redrive: read back its history: %w", err)
	}
	dl, err := broker.OpenRabbitRedrive(ctx, spec.Broker.rabbit(), spec.Broker.Qualify(spec.Redrive.Subscription))
	if err != nil {
		return err
	}
	defer dl.Close()
	r, err := redrive.New(spec.Redrive, dl, db, rec, fp, prior)
	if err != nil {
		return err
	}
	o, err := r.Run(ctx)
	if err != nil {
		return err
	}
	o.Note()
	return nil
}

// runProducers runs the process's own producer client and every one of
// spec.Clients, until ctx ends. The first error of any stops them all.
func runProducers(ctx context.Context, spec Spec, base time.Time, db *pgxpool.Pool, rec *history.Recorder, fp *failpoint.Set, pub publisherCloser) error {
	p, err := producer.New(spec.Producer, db, rec, fp, pub)
	if err != nil {
		return err
	}
	ps := []*producer.Producer{p}
	for _, c := range spec.Clients {
		crec, err := history.NewRecorder(c.History, c.Process, base)
		if err != nil {
			return err
		}
		defer crec.Close()
		cfg := spec.Producer
		cfg.Seed = c.Seed
		p, err := producer.New(cfg, db, crec, fp, pub)
		if err != nil {
			return err
		}
		ps = append(ps, p)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(ps))
	for _, p := range ps {
		go func() {
			err := p.Run(ctx)
			if err != nil {
				cancel()
			}
			errs <- err
		}()
	}
	var all []error
	for range ps {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// readControl applies commands from the harness until "stop" or EOF, then
// cancels the worker.
func readControl(r io.Reader, fp *failpoint.Set, state string, cancel func(), log *slog.Logger) {
	defer cancel()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		switch cmd {
		case "stop":
			return
		case "arm":
			t, err := failpoint.Parse(arg)
			if err != nil {
				log.Error("arm", "err", err)
				continue
			}
			fp.Arm(t)
			if err := failpoint.WriteState(state, fp.Armed()); err != nil {
				log.Error("arm", "err", err)
			}
			log.Info("armed", "failpoint", t.String())
		case "zombie":
			// The nemesis's zombie fault: pause at this failpoint, to be
			// replaced while stopped (failpoint.Set.ArmZombie); "zombie
			// off" disarms it.
			if arg == "off" {
				fp.ArmZombie("", nil)
				continue
			}
			n, err := failpoint.ParseName(arg)
			if err != nil {
				log.Error("zombie", "err", err)
				continue
			}
			fp.ArmZombie(n, pauseSelf)
			log.Info("zombie pause armed", "failpoint", n)
		case "":
		default:
			log.Error("unknown control command", "command", cmd)
		}
	}
}

// pauseSelf is the zombie pause at failpoint n: it tells the harness
// where it stops (the transaction in flight), then stops the process
// with SIGSTOP, and returns once the harness sends SIGCONT.
func pauseSelf(n failpoint.Name, inFlight any) {
	v, _ := inFlight.(history.Value)
	failpoint.Note(fmt.Sprintf("paused at %s in %s", n, cmp.Or(v.Txn, "no transaction")))
	_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
}

// Main is the entry point of a worker process: it reads the spec from the
// environment (supervisor.SpecEnv), runs, and returns the exit code.
func Main(specJSON string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var spec Spec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		log.Error("worker spec", "err", err)
		return 3
	}
	log = log.With("process", spec.Process)
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(workerGCPercent)
	}
	if dir := os.Getenv(ProfileEnv); dir != "" {
		stop, err := startProfile(dir, spec.Process)
		if err != nil {
			log.Error("cpu profile", "err", err)
			return 3
		}
		defer stop()
	}
	if err := Run(context.Background(), spec, os.Stdin, log); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("worker failed", "err", err)
		return 4
	}
	return 0
}

// workerGCPercent is a worker's GOGC unless the environment sets one. A
// worker's live heap is a few MB and it allocates per event (deliveries,
// history lines, SQL arguments), so at the default of 100 it collects
// many times a second; at 400 its heap grows to a few tens of MB and it
// spends about 20µs less CPU per event across the three roles (measured
// with BenchmarkPipeline's CPU split on RabbitMQ).
const workerGCPercent = 400

// ProfileEnv names a directory: when set, every worker writes a CPU profile
// of its life there (<process>-<pid>.pprof), for `go tool pprof`. A worker
// killed by a failpoint or SIGKILL leaves an empty or partial file.
const ProfileEnv = "DELIVERYCHECK_WORKER_CPUPROFILE"

func startProfile(dir, process string) (stop func(), err error) {
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", process, os.Getpid())))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// loadFailpoints reads the terms left armed by an earlier incarnation, or
// parses the spec's terms on the first start.
func loadFailpoints(path string, initial []string) ([]failpoint.Term, error) {
	if _, err := os.Stat(path); err == nil {
		return failpoint.ReadState(path)
	}
	var out []failpoint.Term
	for _, l := range initial {
		t, err := failpoint.Parse(l)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}
