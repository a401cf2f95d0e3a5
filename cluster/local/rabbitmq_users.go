package local

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// A user of a run's own on the single node (the intruder's,
// docs/security.md), made and removed through the node's internal
// database, as rabbitmqctl add_user, set_permissions and delete_user do,
// but over erl_call, which takes milliseconds where rabbitmqctl boots a VM.

// rabbitActingUser is who the node's audit log says made the change.
const rabbitActingUser = RabbitMQUser

// evaluator evaluates an Erlang expression on a node (see
// RabbitMQNode.eval).
type evaluator func(ctx context.Context, expr string) (string, error)

// AddUser implements cluster.RabbitUserAdmin: user with password, and
// permissions on the default vhost "/": configure, write and read are
// RabbitMQ's regular expressions over resource names ("^$" for none).
func (r *RabbitMQ) AddUser(ctx context.Context, user, password, configure, write, read string) error {
	return addRabbitUser(ctx, r.eval, user, password, configure, write, read)
}

// DeleteUser implements cluster.RabbitUserAdmin. A user that does not
// exist is not an error, so a run's cleanup may call it whether or not
// AddUser got that far.
func (r *RabbitMQ) DeleteUser(ctx context.Context, user string) error {
	return deleteRabbitUser(ctx, r.eval, user)
}

// UserExists implements cluster.RabbitUserAdmin.
func (r *RabbitMQ) UserExists(ctx context.Context, user string) (bool, error) {
	return rabbitUserExists(ctx, r.eval, user)
}

// AddUser implements cluster.RabbitUserAdmin for the whole cluster: users
// are the cluster's, so one running node makes it.
func (c *RabbitMQCluster) AddUser(ctx context.Context, user, password, configure, write, read string) error {
	return addRabbitUser(ctx, c.evalAny, user, password, configure, write, read)
}

// DeleteUser implements cluster.RabbitUserAdmin.
func (c *RabbitMQCluster) DeleteUser(ctx context.Context, user string) error {
	return deleteRabbitUser(ctx, c.evalAny, user)
}

// UserExists implements cluster.RabbitUserAdmin.
func (c *RabbitMQCluster) UserExists(ctx context.Context, user string) (bool, error) {
	return rabbitUserExists(ctx, c.evalAny, user)
}

// evalAny evaluates expr on the first node that answers: a fault may
// have any of them down.
func (c *RabbitMQCluster) evalAny(ctx context.Context, expr string) (string, error) {
	var errs []error
	for _, n := range c.nodes {
		out, err := n.eval(ctx, expr)
		if err == nil {
			return out, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", n.Name(), err))
	}
	return "", errors.Join(errs...)
}

func addRabbitUser(ctx context.Context, eval evaluator, user, password, configure, write, read string) error {
	acting := erlBinary(rabbitActingUser)
	expr := fmt.Sprintf(`R1 = rabbit_auth_backend_internal:add_user(%s, %s, %s),
R2 = rabbit_auth_backend_internal:set_permissions(%s, <<"/">>, %s, %s, %s, %s),
lists:flatten(io_lib:format("~w ~w", [R1, R2])).`,
		erlBinary(user), erlBinary(password), acting,
		erlBinary(user), erlBinary(configure), erlBinary(write), erlBinary(read), acting)
	out, err := eval(ctx, expr)
	if err == nil && out != "ok ok" {
		err = fmt.Errorf("answered %s", out)
	}
	if err != nil {
		return fmt.Errorf("rabbitmq: add user %s: %w", user, err)
	}
	return nil
}

func deleteRabbitUser(ctx context.Context, eval evaluator, user string) error {
	// RabbitMQ 3.10 raises no_such_user rather than returning it.
	expr := fmt.Sprintf(`try rabbit_auth_backend_internal:delete_user(%s, %s) of
  ok -> "ok";
  {error, {no_such_user, _}} -> "ok";
  E -> lists:flatten(io_lib:format("~w", [E]))
catch
  _:{error, {no_such_user, _}} -> "ok"
end.`, erlBinary(user), erlBinary(rabbitActingUser))
	out, err := eval(ctx, expr)
	if err == nil && out != "ok" {
		err = fmt.Errorf("answered %s", out)
	}
	if err != nil {
		return fmt.Errorf("rabbitmq: delete user %s: %w", user, err)
	}
	return nil
}

func rabbitUserExists(ctx context.Context, eval evaluator, user string) (bool, error) {
	expr := fmt.Sprintf(`case rabbit_auth_backend_internal:lookup_user(%s) of
  {ok, _} -> "yes";
  _ -> "no"
end.`, erlBinary(user))
	out, err := eval(ctx, expr)
	if err != nil {
		return false, fmt.Errorf("rabbitmq: look up user %s: %w", user, err)
	}
	return out == "yes", nil
}

// eval evaluates expr on the node with erl_call, as a hidden node of a
// name of its own, and returns the string it yields (see erlCallResult).
func (r *RabbitMQ) eval(ctx context.Context, expr string) (string, error) {
	erlCall, err := erlCallBinary()
	if err != nil {
		return "", err
	}
	// The node's private epmd, not a host's on 4369.
	argv := append([]string{erlCall}, erlCallArgs(ctx, 10, r.node, r.cookie)...)
	return runErlCall(ctx, argv, []string{"ERL_EPMD_PORT=" + strconv.Itoa(r.epmdPort)}, expr)
}
