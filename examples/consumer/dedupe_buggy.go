//go:build buggy

package main

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// firstDelivery, in the buggy build, trusts the broker to deliver once:
// every delivery counts as new, so a redelivery reserves stock twice.
func firstDelivery(ctx context.Context, tx pgx.Tx, subscription, event string) (bool, error) {
	return true, nil
}
