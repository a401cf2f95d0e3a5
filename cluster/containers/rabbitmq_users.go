package containers

import (
	"context"
	"fmt"
	"strings"
)

// A user of a run's own on the container's node (the intruder's,
// docs/security.md), through rabbitmqctl inside the container.

// AddUser implements cluster.RabbitUserAdmin: user with password, and
// permissions on the default vhost "/" (regular expressions; "^$" for
// none).
func (q *RabbitMQService) AddUser(ctx context.Context, user, password, configure, write, read string) error {
	if err := q.ctl(ctx, "add_user", user, password); err != nil {
		return fmt.Errorf("rabbitmq: add user %s: %w", user, err)
	}
	if err := q.ctl(ctx, "set_permissions", "-p", "/", user, configure, write, read); err != nil {
		return fmt.Errorf("rabbitmq: set permissions of %s: %w", user, err)
	}
	return nil
}

// DeleteUser implements cluster.RabbitUserAdmin; a user that does not
// exist is not an error.
func (q *RabbitMQService) DeleteUser(ctx context.Context, user string) error {
	ok, err := q.UserExists(ctx, user)
	if err != nil || !ok {
		return err
	}
	if err := q.ctl(ctx, "delete_user", user); err != nil {
		return fmt.Errorf("rabbitmq: delete user %s: %w", user, err)
	}
	return nil
}

// UserExists implements cluster.RabbitUserAdmin.
func (q *RabbitMQService) UserExists(ctx context.Context, user string) (bool, error) {
	id, err := q.containerID()
	if err != nil {
		return false, err
	}
	out, code, err := q.execOutput(ctx, id, []string{"rabbitmqctl", "-q", "list_users", "--no-table-headers"})
	if err == nil && code != 0 {
		err = fmt.Errorf("rabbitmqctl list_users: exit %d: %s", code, strings.TrimSpace(out))
	}
	if err != nil {
		return false, fmt.Errorf("rabbitmq: look up user %s: %w", user, err)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == user {
			return true, nil
		}
	}
	return false, nil
}

// ctl runs rabbitmqctl with args in the container.
func (q *RabbitMQService) ctl(ctx context.Context, args ...string) error {
	id, err := q.containerID()
	if err != nil {
		return err
	}
	out, code, err := q.execOutput(ctx, id, append([]string{"rabbitmqctl", "-q"}, args...))
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("rabbitmqctl %s: exit %d: %s", args[0], code, strings.TrimSpace(out))
	}
	return nil
}
