// Package cluster provisions the real servers a deliverycheck run breaks on
// purpose: PostgreSQL, Kafka and RabbitMQ, each behind a toxiproxy link.
//
// Read [Service] first: it is the small core every runtime implements (the
// local child-process runtime lives in cluster/local, the containers one in
// cluster/containers); [Killer], [Pauser], [Restarter], [LogFiler],
// [Versioner] and [PIDer] are the optional abilities a runtime may add,
// and both have them all. [Cluster] is the set of services a scenario
// needs, each reached through a [link.Link] so a nemesis can partition,
// delay or reset one connection in one direction.
package cluster
