// Package cluster provisions the real servers a deliverycheck run breaks on
// purpose: PostgreSQL, Kafka and RabbitMQ, each behind a toxiproxy link.
//
// Read [Service] first: it is the contract every runtime implements (the
// local child-process runtime lives in cluster/local). [Cluster] is the set
// of services a scenario needs, each reached through a [Link] so a nemesis
// can partition, delay or reset one connection in one direction.
package cluster
