// Package containers runs PostgreSQL, Kafka and RabbitMQ as containers
// through testcontainers-go, on Docker or on Podman's Docker-compatible
// API, behind the same cluster.Service interface as the local runtime.
//
// Images default to the official ones (postgres, rabbitmq, apache/kafka)
// and can be overridden per service; anything that honours the official
// images' environment contract works (images/ in this repository builds
// such images from Debian packages for machines with no registry).
//
// What differs from a plain testcontainers setup, and why:
//   - Host ports are chosen up front and pinned in the container's port
//     bindings: a restarted container keeps them, so clients, toxiproxy
//     links and Kafka's advertised listener never point at a stale address.
//     They come from below the kernel's ephemeral range (cluster/freeport),
//     so no outgoing connection takes one while its container is down.
//   - Kill, pause and unpause go through the engine's API (testcontainers
//     has no such calls), so a crash is a real SIGKILL of the container.
//   - Ryuk is not used (its image may not be pullable, and Podman does not
//     need it): every container is labelled with the harness's pid, a
//     watchdog process removes them if the harness dies, and the next run
//     on the machine sweeps any whose owner is gone.
//   - Readiness is a real client call (package probe), the same check the
//     local runtime makes, not a log line.
//   - Engine detection never panics (testcontainers does when it finds no
//     engine): see [Detect].
//   - The network containers join is settled once, before services start
//     in parallel, instead of lazily by each create (three racing creates
//     failed the first run on a fresh engine): see network.go.
//   - Replicated services' nodes are pairs of containers on a network of
//     the run, a holder owning the namespace and the server joining it, so
//     partitions are iptables rules the harness puts in the holders'
//     namespaces from the host (netns.Attach) and survive a node's kill:
//     see nodes.go.
package containers
