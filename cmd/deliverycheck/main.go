package main

import (
	_ "github.com/Shopify/toxiproxy/v2"
	_ "github.com/jackc/pgx/v5"
	_ "github.com/rabbitmq/amqp091-go"
	_ "github.com/spf13/cobra"
	_ "github.com/twmb/franz-go/pkg/kgo"
	_ "pgregory.net/rapid"
	_ "github.com/twmb/franz-go/pkg/kadm"
)

func main() {}
