package local

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/deliverycheck/deliverycheck/cluster/freeport"
	"github.com/deliverycheck/deliverycheck/cluster/probe"
	"github.com/deliverycheck/deliverycheck/internal/logtail"
	"github.com/deliverycheck/deliverycheck/internal/maven"
	"github.com/deliverycheck/deliverycheck/process"
	"github.com/deliverycheck/deliverycheck/process/guard"
)

// DefaultKafkaVersion is the Apache Kafka release run when none is asked for.
const DefaultKafkaVersion = "4.1.1"

// kafkaPom lists the broker's jars for Maven; the Kafka version is a
// property overridden on the mvn command line.
//
//go:embed kafka-pom.xml
var kafkaPom []byte

const (
	// kafkaNodeID is the single node's id, broker and controller at once.
	kafkaNodeID = 1
	// kafkaStartTimeout bounds the wait for readiness when the caller's
	// context has no deadline: a broker not up in this long will not come up.
	kafkaStartTimeout = 2 * time.Minute
	// kafkaStopTimeout bounds a graceful stop before it turns into a kill.
	kafkaStopTimeout = 30 * time.Second
)

// KafkaOptions configure a local Apache Kafka broker.
type KafkaOptions struct {
	Options
	// Version is the Apache Kafka release, overriding the default
	// DefaultKafkaVersion. It is ignored when KAFKA_HOME is set: the
	// installed jars decide, and Version() reports what really ran.
	Version string
	// Advertise is the host:port the broker hands out to clients in
	// metadata, normally the listen address of a proxy link in front of
	// it, overriding the default of the broker's own listener. Kafka
	// clients dial whatever the broker advertises after their first
	// request, so without this they would bypass the proxy.
	Advertise string
	// HeapMB is the JVM's maximum heap in MiB, overriding the default 512.
	HeapMB int
}

// Kafka is a single-node Apache Kafka broker in KRaft mode (broker and
// controller in one JVM) run from the Maven Central jars or a Kafka install.
//
// It has four listeners on 127.0.0.1: the client listener (Endpoint,
// advertised as KafkaOptions.Advertise), a broker listener used for the
// broker's traffic to itself (transaction markers), the controller
// listener, and a SASL listener (SASLEndpoint) where users of a run's own
// log in, authorized by ACLs (see kafkaConfig.sasl). Keeping inter-broker traffic off the client listener means a
// fault on the client's proxy link hits clients only, as it would with a
// real network between clients and a cluster.
type Kafka struct {
	*base
	version   string // requested release
	advertise string
	heapMB    int
	port      int // client listener
	brokerPt  int // inter-broker listener
	ctrlPort  int // controller listener
	saslPort  int // SASL listener (SCRAM-SHA-256 users: the intruder's)
	data      string
	logPath   string

	mu      sync.Mutex
	running string // exact version, set once Start succeeded

	prepMu sync.Mutex // held while fetching and preparing, which can take long
	prep   *kafkaPrep
}

// NewKafka prepares a broker on free ports in a fresh temp dir. Nothing
// runs until Start, but Endpoint is valid at once, so a proxy can be put
// in front of the broker before it starts. The caller should call Close
// when finished.
func NewKafka(o KafkaOptions) (*Kafka, error) {
	if o.Version == "" {
		o.Version = DefaultKafkaVersion
	}
	if o.HeapMB <= 0 {
		o.HeapMB = 512
	}
	ports, err := freeport.Take(4)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	b, err := newBase("kafka", o.Options)
	if err != nil {
		return nil, err
	}
	k := &Kafka{
		base:     b,
		version:  o.Version,
		heapMB:   o.HeapMB,
		port:     ports[0],
		brokerPt: ports[1],
		ctrlPort: ports[2],
		saslPort: ports[3],
		data:     filepath.Join(b.dir, "data"),
		logPath:  filepath.Join(b.dir, "kafka.log"),
	}
	k.advertise = o.Advertise
	if k.advertise == "" {
		k.advertise = k.Endpoint()
	}
	if err := writeKafkaConfig(b.dir, k.data, k.port, k.brokerPt, k.ctrlPort, k.saslPort, k.advertise); err != nil {
		b.closeBase(nil)
		return nil, fmt.Errorf("kafka: %w", err)
	}
	return k, nil
}

// Endpoint implements cluster.Service: the client listener, dialled
// directly. A client that bootstraps here is still sent to the advertised
// address for everything after its first metadata request.
func (k *Kafka) Endpoint() string { return fmt.Sprintf("127.0.0.1:%d", k.port) }

// Advertised is the host:port the broker hands out to clients.
func (k *Kafka) Advertised() string { return k.advertise }

// SASLEndpoint implements cluster.SASLListener: the listener where
// clients log in with SCRAM-SHA-256 (the intruder's), dialled directly
// and advertised as itself, not through the broker's link.
func (k *Kafka) SASLEndpoint() string { return fmt.Sprintf("127.0.0.1:%d", k.saslPort) }

// LogFile implements cluster.LogFiler: the broker's log4j2 output and the
// JVM's own stdout and stderr, in one file.
func (k *Kafka) LogFile() string { return k.logPath }

// Version implements cluster.Versioner, e.g. "Apache Kafka 4.1.1", read
// from the name of the broker jar that ran.
func (k *Kafka) Version() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.running
}

// Start implements cluster.Service. The first start fetches the jars and
// builds the per-machine cache if needed (see PrepareKafka) and formats
// the storage; later starts reuse the data. Ready means a metadata request
// sent straight to Endpoint is answered and lists this broker, so
// readiness does not depend on the advertised address being reachable
// (its proxy may not be up yet).
func (k *Kafka) Start(ctx context.Context) error {
	prep, err := k.prepare(ctx)
	if err != nil {
		return fmt.Errorf("start kafka: %w", err)
	}
	if err := formatKafka(prep, k.data, kafkaNodeID, KafkaUUID()); err != nil {
		return fmt.Errorf("start kafka: %w", err)
	}
	if err := runKafka(ctx, k.base, prep.brokerSpec(k.dir, k.heapMB, k.logPath, ""), k.Endpoint(), kafkaNodeID, k.logPath); err != nil {
		return fmt.Errorf("start kafka: %w", err)
	}
	k.mu.Lock()
	k.running = "Apache Kafka " + prep.version
	k.mu.Unlock()
	k.log.Info("ready", "endpoint", k.Endpoint(), "advertised", k.advertise, "version", k.Version())
	return nil
}

// runKafka launches the broker spec on b and waits until a metadata
// request sent straight to endpoint is answered and lists nodeID. A
// broker that does not get there is killed: a failed start leaves
// nothing half-started behind. Without a deadline in ctx the wait is
// bounded by kafkaStartTimeout.
func runKafka(ctx context.Context, b *base, spec process.Spec, endpoint string, nodeID int32, logPath string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(endpoint), kgo.DialTimeout(time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	p, err := b.launch(spec)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, kafkaStartTimeout)
		defer cancel()
	}
	if err := b.waitReady(ctx, p, logPath, func(ctx context.Context) error { return probe.Kafka(ctx, cl, nodeID) }); err != nil {
		kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return errors.Join(err, p.Kill(kctx))
	}
	return nil
}

// Stop implements cluster.Service: SIGTERM, which makes the broker shut
// down in a controlled way (logs flushed and closed cleanly, so the next
// start skips log recovery). A broker that has not exited after 30 s, or
// when ctx ends, is killed.
func (k *Kafka) Stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, kafkaStopTimeout)
	defer cancel()
	return k.stopWith(ctx, syscall.SIGTERM)
}

// Restart implements cluster.Restarter: same ports, same data, no re-format.
func (k *Kafka) Restart(ctx context.Context) error {
	if err := k.Stop(ctx); err != nil {
		return err
	}
	return k.Start(ctx)
}

// Close implements cluster.Service.
func (k *Kafka) Close() error { return k.closeBase(nil) }

// prepare finds java and the jars and the per-machine cache, once per Kafka.
func (k *Kafka) prepare(ctx context.Context) (*kafkaPrep, error) {
	k.prepMu.Lock()
	defer k.prepMu.Unlock()
	if k.prep != nil {
		return k.prep, nil
	}
	p, err := prepareKafka(ctx, k.version, k.g, k.log)
	if err != nil {
		return nil, err
	}
	k.prep = p
	return p, nil
}

// formatKafka lays out a fresh log dir in data before a broker's first
// start: the feature levels Kafka's own `kafka-storage format` chose for
// this release (kept in the cache), and a meta.properties with the
// cluster's id, the node's and a new directory id. An existing log dir (a
// restart) is left alone.
func formatKafka(p *kafkaPrep, data string, nodeID int, clusterID string) error {
	if _, err := os.Stat(filepath.Join(data, "meta.properties")); err == nil {
		return nil
	}
	if err := os.MkdirAll(data, 0o755); err != nil {
		return fmt.Errorf("format: %w", err)
	}
	if err := copyFile(p.bootstrap, filepath.Join(data, "bootstrap.checkpoint")); err != nil {
		return fmt.Errorf("format: %w", err)
	}
	meta := fmt.Sprintf("#written by deliverycheck, as kafka-storage format does\nnode.id=%d\ndirectory.id=%s\nversion=1\ncluster.id=%s\n",
		nodeID, KafkaUUID(), clusterID)
	if err := os.WriteFile(filepath.Join(data, "meta.properties"), []byte(meta), 0o644); err != nil {
		return fmt.Errorf("format: %w", err)
	}
	return nil
}

// kafkaDirectoryID is the directory id formatKafka gave the log dir in
// data, or "none" if it has none (never formatted, or wiped).
func kafkaDirectoryID(data string) string {
	b, err := os.ReadFile(filepath.Join(data, "meta.properties"))
	if err != nil {
		return "none"
	}
	return KafkaDirectoryID(string(b))
}

// KafkaDirectoryID is the directory.id a log dir's meta.properties
// (its text) gives, "none" if it has none: what tells a wiped node's new
// disk from its old one.
func KafkaDirectoryID(metaProperties string) string {
	for _, line := range strings.Split(metaProperties, "\n") {
		if v, ok := strings.CutPrefix(line, "directory.id="); ok {
			return strings.TrimSpace(v)
		}
	}
	return "none"
}

// KafkaUUID returns a random Kafka Uuid in its base64 form. Like Kafka's
// Uuid.randomUuid it avoids a leading '-', which command-line tools would
// take for a flag.
func KafkaUUID() string {
	for {
		var b [16]byte
		_, _ = rand.Read(b[:])
		s := base64.RawURLEncoding.EncodeToString(b[:])
		if s[0] != '-' {
			return s
		}
	}
}

// writeKafkaConfig writes the single node's server.properties and
// log4j2.properties to dir. Besides the client, broker and controller
// listeners it has a SASL listener on saslPort for users of a run's own
// (see kafkaConfig.sasl).
func writeKafkaConfig(dir, data string, port, brokerPort, ctrlPort, saslPort int, advertise string) error {
	c := kafkaConfig{
		comment: "Single-node KRaft: broker and controller in one process.",
		nodeID:  kafkaNodeID,
		// A static quorum (not format --standalone): the formatted storage
		// then holds no address, so one format in the cache serves every
		// broker.
		voters:     fmt.Sprintf("%d@127.0.0.1:%d", kafkaNodeID, ctrlPort),
		listeners:  fmt.Sprintf("PLAINTEXT://127.0.0.1:%d,BROKER://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d,SASL://127.0.0.1:%d", port, brokerPort, ctrlPort, saslPort),
		advertised: fmt.Sprintf("PLAINTEXT://%s,BROKER://127.0.0.1:%d,SASL://127.0.0.1:%d", advertise, brokerPort, saslPort),
		sasl:       true,
		data:       data,
		replicas:   1, minISR: 1,
		internalReplicas: 1, internalMinISR: 1,
		// After kill -9 the controller refuses the restarted broker's
		// registration (DUPLICATE_BROKER_REGISTRATION) until the dead
		// incarnation's session expires: 9 s by default, 2 s here.
		// Broker and controller share one JVM, so a pause or GC stall
		// freezes both and cannot fence the broker.
		sessionMS: 2000,
	}
	return c.write(dir)
}

// kafkaConfig is what a broker's server.properties says, for the single
// node and for the nodes of a cluster alike: they differ in addresses,
// quorum and replication only.
type kafkaConfig struct {
	comment    string // the file's first line, without "# "
	nodeID     int
	voters     string // controller.quorum.voters: id@host:port,...
	listeners  string
	advertised string // the controller listener is never advertised
	data       string // log.dirs
	// replicas and minISR are the defaults of topics clients create;
	// internalReplicas and internalMinISR those of the offsets,
	// transaction and share-state topics.
	replicas, minISR                 int
	internalReplicas, internalMinISR int
	unclean                          bool
	sessionMS                        int // broker.session.timeout.ms
	lagMS                            int // replica.lag.time.max.ms; 0: Kafka's default
	// sasl adds a listener named SASL (in listeners and advertised) where
	// clients log in with SCRAM-SHA-256, and the StandardAuthorizer, with
	// the plaintext listeners' principal (User:ANONYMOUS: the harness's
	// clients, the broker's own traffic and the controller's) a super
	// user, so nothing the harness does changes: only a SASL user's
	// requests are decided by ACLs (docs/security.md).
	sasl bool
}

// write writes server.properties and log4j2.properties to dir, and the
// JVM's tmp dir.
func (c kafkaConfig) write(dir string) error {
	log4j := `# Everything to stdout, which the harness appends to kafka.log.
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.state.name = state.change.logger
logger.state.level = WARN
`
	if err := os.WriteFile(filepath.Join(dir, "server.properties"), []byte(c.properties()), 0o644); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "log4j2.properties"), []byte(log4j), 0o644); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	return nil
}

// properties is the text of server.properties.
func (c kafkaConfig) properties() string {
	var b strings.Builder
	fmt.Fprintf(&b, `# %s
process.roles=broker,controller
node.id=%d
controller.quorum.voters=%s
controller.listener.names=CONTROLLER
listeners=%s
advertised.listeners=%s
listener.security.protocol.map=%s
inter.broker.listener.name=BROKER
log.dirs=%s
num.partitions=3
default.replication.factor=%d
min.insync.replicas=%d
unclean.leader.election.enable=%t
auto.create.topics.enable=true
# Internal topics: few partitions (created on first use, so fewer
# partitions means a faster first consumer group or transaction).
offsets.topic.replication.factor=%d
offsets.topic.num.partitions=5
transaction.state.log.replication.factor=%d
transaction.state.log.min.isr=%d
transaction.state.log.num.partitions=5
share.coordinator.state.topic.replication.factor=%d
share.coordinator.state.topic.min.isr=%d
group.initial.rebalance.delay.ms=0
# A killed consumer's partitions stay unconsumed until its group session
# expires; let clients ask for sessions as short as 1 s (default min 6 s).
group.min.session.timeout.ms=1000
controlled.shutdown.enable=true
broker.session.timeout.ms=%d
broker.heartbeat.interval.ms=500
`, c.comment, c.nodeID, c.voters, c.listeners, c.advertised, c.protocols(), c.data,
		c.replicas, c.minISR, c.unclean,
		c.internalReplicas, c.internalReplicas, c.internalMinISR, c.internalReplicas, c.internalMinISR,
		c.sessionMS)
	if c.lagMS > 0 {
		fmt.Fprintf(&b, "replica.lag.time.max.ms=%d\n", c.lagMS)
	}
	if c.sasl {
		b.WriteString(kafkaSASLProperties)
	}
	if c.unclean {
		// A partition left without a leader is not always given an
		// unclean one at once: seen with 4.1.1, a replica back from an
		// unclean shutdown on a new disk is unfenced before its
		// partitions are assigned to the new directory, and only the
		// controller's periodic check elects it then, every 5 minutes
		// by default. Once a second, as the setting intends.
		b.WriteString("unclean.leader.election.interval.ms=1000\n")
	}
	return b.String()
}

// protocols is listener.security.protocol.map.
func (c kafkaConfig) protocols() string {
	m := "PLAINTEXT:PLAINTEXT,BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT"
	if c.sasl {
		m += ",SASL:SASL_PLAINTEXT"
	}
	return m
}

// kafkaSASLProperties are the lines kafkaConfig.sasl adds; its listener
// is in listeners already (and SASL_PLAINTEXT in the protocol map).
const kafkaSASLProperties = `# Users of a run's own (the intruder's) log in on the SASL listener with
# SCRAM-SHA-256 and are authorized by ACLs; every plaintext client is
# User:ANONYMOUS, a super user.
listener.name.sasl.sasl.enabled.mechanisms=SCRAM-SHA-256
listener.name.sasl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
`

// kafkaPrep is what starting a broker needs besides its config: java, the
// jars, and what the per-machine cache holds for them.
type kafkaPrep struct {
	java      string
	libs      string
	version   string // exact release of the jars
	classpath string
	bootstrap string // bootstrap.checkpoint template
	cds       string // class data sharing archive, "" if none
}

// brokerSpec is the command line of a broker whose config is in dir.
// dumpCDS, when set, makes the JVM write a class data sharing archive
// there when it exits.
//
// JVM choices, measured on a 2-core machine: C1 only
// (TieredStopAtLevel=1) and SerialGC start the broker about twice as
// fast as the defaults and spend no cores on C2 or concurrent GC threads;
// a test broker needs no peak throughput. The class data sharing archive
// roughly halves start time again. PerfData is off and java.io.tmpdir is
// in the temp dir, so a killed JVM leaves nothing in /tmp.
func (p *kafkaPrep) brokerSpec(dir string, heapMB int, log, dumpCDS string) process.Spec {
	args := []string{
		fmt.Sprintf("-Xmx%dm", heapMB),
		fmt.Sprintf("-Xms%dm", max(heapMB/2, 64)),
		"-XX:+UseSerialGC",
		"-XX:TieredStopAtLevel=1",
		"-XX:-UsePerfData",
		"-XX:+ExitOnOutOfMemoryError",
		"-Djava.awt.headless=true",
		"-Djava.io.tmpdir=" + filepath.Join(dir, "tmp"),
		"-Dlog4j2.configurationFile=" + filepath.Join(dir, "log4j2.properties"),
		"-Dlog4j2.disable.jmx=true",
		"-Dkafka.logs.dir=" + dir,
	}
	switch {
	case dumpCDS != "":
		args = append(args, "-XX:ArchiveClassesAtExit="+dumpCDS)
	case p.cds != "":
		args = append(args, "-XX:SharedArchiveFile="+p.cds)
	}
	args = append(args, "-cp", p.classpath, "kafka.Kafka", filepath.Join(dir, "server.properties"))
	return process.Spec{Path: p.java, Args: args, Dir: dir, Log: log}
}

// KafkaJars returns the directory holding the broker jars of version:
// $KAFKA_HOME/libs when KAFKA_HOME is set, else a per-user cache outside
// the work tree (os.UserCacheDir()/deliverycheck/kafka-<version>/libs),
// fetched from Maven Central with mvn on first use (see internal/maven:
// into a temp dir renamed into place, under the cache's lock).
func KafkaJars(ctx context.Context, version string) (string, error) {
	if version == "" {
		version = DefaultKafkaVersion
	}
	dir, ok := KafkaJarsStatus(version)
	if ok {
		return dir, nil
	}
	if os.Getenv("KAFKA_HOME") != "" {
		return "", fmt.Errorf("kafka: KAFKA_HOME=%s has no broker jar in %s", os.Getenv("KAFKA_HOME"), dir)
	}
	unlock, err := maven.Lock(ctx)
	if err != nil {
		return "", fmt.Errorf("kafka: %w", err)
	}
	defer unlock()
	if _, ok := KafkaJarsStatus(version); ok {
		return dir, nil // fetched while we waited for the lock
	}
	if err := fetchKafkaJars(ctx, version, dir); err != nil {
		return "", fmt.Errorf("kafka: fetch %s jars: %w", version, err)
	}
	return dir, nil
}

// KafkaJarsStatus says where the jars of version are or would be cached,
// and whether they are there. It never fetches (for `deliverycheck doctor`).
func KafkaJarsStatus(version string) (dir string, ok bool) {
	if version == "" {
		version = DefaultKafkaVersion
	}
	if home := os.Getenv("KAFKA_HOME"); home != "" {
		dir = filepath.Join(home, "libs")
		_, err := kafkaJarVersion(dir)
		return dir, err == nil
	}
	cache, err := maven.Root()
	if err != nil {
		return "", false
	}
	dir = filepath.Join(cache, "kafka-"+version, "libs")
	v, err := kafkaJarVersion(dir)
	return dir, err == nil && v == version
}

// fetchKafkaJars fetches the broker jars of version into dest.
func fetchKafkaJars(ctx context.Context, version, dest string) error {
	if err := maven.Fetch(ctx, kafkaPom, dest, "-Dkafka.version="+version); err != nil {
		return fmt.Errorf("%w, or set KAFKA_HOME to a Kafka install", err)
	}
	if v, err := kafkaJarVersion(dest); err != nil || v != version {
		os.RemoveAll(dest)
		return fmt.Errorf("mvn fetched no kafka_2.13-%s.jar (got %q, %v)", version, v, err)
	}
	return nil
}

var kafkaJarRe = regexp.MustCompile(`^kafka_2\.1[0-9]-([0-9][0-9A-Za-z.]*(?:-[0-9A-Za-z.]+)?)\.jar$`)

// kafkaJarVersion reads the release from the broker jar's name in libs
// (kafka_2.13-4.1.1.jar → 4.1.1); the broker does not tell its version
// over the protocol.
func kafkaJarVersion(libs string) (string, error) {
	ents, err := os.ReadDir(libs)
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		n := e.Name()
		if strings.HasSuffix(n, "-test.jar") || strings.HasSuffix(n, "-sources.jar") || strings.HasSuffix(n, "-javadoc.jar") {
			continue
		}
		if m := kafkaJarRe.FindStringSubmatch(n); m != nil {
			return m[1], nil
		}
	}
	return "", fmt.Errorf("no kafka_2.13-<version>.jar in %s", libs)
}

// PrepareKafka makes sure everything a broker of version needs is on this
// machine, so that the first Start is as fast as later ones: the jars (see
// KafkaJars), and a per-machine cache entry built from them once, with
// Kafka's own tools: the storage bootstrap written by `kafka-storage
// format` and a class data sharing archive of a broker's start. It returns
// the cache entry's directory. `deliverycheck deps` runs it; Start runs
// it too when needed.
func PrepareKafka(ctx context.Context, version string) (string, error) {
	g, err := guard.Start(guard.Options{})
	if err != nil {
		return "", fmt.Errorf("kafka: %w", err)
	}
	defer g.Close()
	p, err := prepareKafka(ctx, version, g, nil)
	if err != nil {
		return "", err
	}
	return filepath.Dir(p.bootstrap), nil
}

// prepareKafka resolves java and the jars, and builds the cache entry for
// them if it is missing. The entry's key covers the java binary and every
// jar, so a JDK upgrade or other jars get a new entry (a class data
// sharing archive only works for the JVM and classpath it was made with).
func prepareKafka(ctx context.Context, version string, g *guard.Guard, log *slog.Logger) (*kafkaPrep, error) {
	if log == nil {
		log = slog.Default()
	}
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, fmt.Errorf("kafka: java not found on PATH (install with: %s)", maven.InstallJava)
	}
	if real, err := filepath.EvalSymlinks(java); err == nil {
		java = real
	}
	libs, err := KafkaJars(ctx, version)
	if err != nil {
		return nil, err
	}
	exact, err := kafkaJarVersion(libs)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	jars, key, err := kafkaClasspath(libs, java)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	p := &kafkaPrep{java: java, libs: libs, version: exact, classpath: strings.Join(jars, ":")}
	root, err := maven.Root()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, "kafka-prep", key)
	if !fileExists(filepath.Join(dir, "bootstrap.checkpoint")) {
		unlock, err := maven.Lock(ctx)
		if err != nil {
			return nil, fmt.Errorf("kafka: %w", err)
		}
		defer unlock()
	}
	if !fileExists(filepath.Join(dir, "bootstrap.checkpoint")) {
		log.Info("preparing kafka cache (once per machine)", "dir", dir)
		start := time.Now()
		if err := buildKafkaPrep(ctx, p, dir, g); err != nil {
			return nil, fmt.Errorf("kafka: prepare %s: %w", dir, err)
		}
		log.Info("prepared kafka cache", "dir", dir, "took", time.Since(start).Round(time.Millisecond))
	}
	p.bootstrap = filepath.Join(dir, "bootstrap.checkpoint")
	if fileExists(filepath.Join(dir, "classes.jsa")) {
		p.cds = filepath.Join(dir, "classes.jsa")
	} else {
		log.Warn("kafka: no class data sharing archive, start will be slower", "dir", dir)
	}
	return p, nil
}

// kafkaClasspath lists the jars in libs in a stable order and derives the
// cache key from them and the java binary.
func kafkaClasspath(libs, java string) (jars []string, key string, err error) {
	ents, err := os.ReadDir(libs)
	if err != nil {
		return nil, "", err
	}
	h := sha256.New()
	fi, err := os.Stat(java)
	if err != nil {
		return nil, "", err
	}
	fmt.Fprintf(h, "%s %d %d\n", java, fi.Size(), fi.ModTime().UnixNano())
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".jar") {
			continue
		}
		path := filepath.Join(libs, e.Name())
		fi, err := os.Stat(path)
		if err != nil {
			return nil, "", err
		}
		jars = append(jars, path)
		fmt.Fprintf(h, "%s %d %d\n", path, fi.Size(), fi.ModTime().UnixNano())
	}
	sort.Strings(jars)
	if len(jars) == 0 {
		return nil, "", fmt.Errorf("no jars in %s", libs)
	}
	return jars, hex.EncodeToString(h.Sum(nil))[:16], nil
}

// buildKafkaPrep builds the cache entry dir in a temp dir next to it and
// renames it into place, under the cache lock:
//
//  1. `kafka-storage format` (kafka.tools.StorageTool) on a throwaway
//     config yields bootstrap.checkpoint: the feature levels Kafka picks
//     for a new cluster of this release. With a static controller quorum
//     it holds no ports or ids, so every broker can start from a copy;
//     that saves a 2–6 s JVM run per broker.
//  2. A broker started from that storage, made ready and stopped
//     gracefully, writes classes.jsa: the classes it loaded, parsed and
//     verified, which later JVMs map instead of loading again. Without it
//     brokers still start, only slower.
func buildKafkaPrep(ctx context.Context, p *kafkaPrep, dir string, g *guard.Guard) error {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, ".build-")
	if err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := g.TrackDir(tmp); err != nil {
		return err
	}
	run := filepath.Join(tmp, "run")
	if err := os.Mkdir(run, 0o755); err != nil {
		return err
	}
	ports, err := freeport.Take(4)
	if err != nil {
		return err
	}
	data := filepath.Join(run, "data")
	ep := fmt.Sprintf("127.0.0.1:%d", ports[0])
	if err := writeKafkaConfig(run, data, ports[0], ports[1], ports[2], ports[3], ep); err != nil {
		return err
	}
	logPath := filepath.Join(run, "kafka.log")

	// 1. Format.
	fmtSpec := process.Spec{Path: p.java, Dir: run, Log: logPath, Args: []string{
		"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
		"-Djava.io.tmpdir=" + filepath.Join(run, "tmp"),
		"-Dlog4j2.configurationFile=" + filepath.Join(run, "log4j2.properties"),
		"-cp", p.classpath, "kafka.tools.StorageTool", "format",
		"-t", KafkaUUID(), "-c", filepath.Join(run, "server.properties"),
	}}
	fp, err := process.Start(fmtSpec, g)
	if err != nil {
		return fmt.Errorf("format: %w", err)
	}
	select {
	case <-fp.Done():
	case <-ctx.Done():
		_ = fp.Kill(context.Background())
		return fmt.Errorf("format: %w", ctx.Err())
	}
	if fp.Err() != nil {
		return fmt.Errorf("format: %w\n%s", fp.Err(), logtail.File(logPath, 20))
	}
	if err := copyFile(filepath.Join(data, "bootstrap.checkpoint"), filepath.Join(tmp, "bootstrap.checkpoint")); err != nil {
		return fmt.Errorf("format: %w", err)
	}

	// 2. Class data sharing archive from one start and graceful stop.
	jsa := filepath.Join(tmp, "classes.jsa")
	bp, err := process.Start(p.brokerSpec(run, 512, logPath, jsa), g)
	if err != nil {
		return fmt.Errorf("training broker: %w", err)
	}
	killed := false
	defer func() {
		if !killed {
			_ = bp.Kill(context.Background())
		}
	}()
	cl, err := kgo.NewClient(kgo.SeedBrokers(ep), kgo.DialTimeout(time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	ready := false
	for !ready {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ready = probe.Kafka(pctx, cl, kafkaNodeID) == nil
		cancel()
		if ready {
			break
		}
		select {
		case <-bp.Done():
			return fmt.Errorf("training broker exited (%v)\n%s", bp.Err(), logtail.File(logPath, 20))
		case <-ctx.Done():
			return fmt.Errorf("training broker: %w\n%s", ctx.Err(), logtail.File(logPath, 20))
		case <-time.After(100 * time.Millisecond):
		}
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = bp.Stop(sctx, syscall.SIGTERM)
	killed = true
	if err != nil {
		return fmt.Errorf("training broker: %w", err)
	}
	if fi, err := os.Stat(jsa); err != nil || fi.Size() == 0 {
		// Not fatal: some JVMs cannot dump a dynamic archive.
		os.Remove(jsa)
	}
	if err := os.RemoveAll(run); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// copyFile copies src to dst (created or truncated).
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
