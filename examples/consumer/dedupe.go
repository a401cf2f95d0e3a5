//go:build !buggy

package main

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// firstDelivery records the event in the inbox and reports whether it was
// new; the primary key makes a second delivery a no-op.
func firstDelivery(ctx context.Context, tx pgx.Tx, subscription, event string) (bool, error) {
	tag, err := tx.Exec(ctx, `INSERT INTO shop_inbox (consumer, event_id) VALUES ($1, $2)
		ON CONFLICT DO NOTHING`, subscription, event)
	return tag.RowsAffected() == 1, err
}
